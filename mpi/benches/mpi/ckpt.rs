//! `--ckpt`: what the checkpoint API costs. The ring with and without a
//! `snapshot` call every loop (nothing due: the price of a safe point; then a
//! checkpoint every second), and zstd against gzip on the kinds of arrays
//! programs protect.

use std::time::{Duration, Instant};

use p2pmp_mpi::ckpt::{Codec, compress, decompress};

use crate::{Results, run};

/// The ring rows: plain, with a snapshot a loop, and with one checkpoint a second.
pub(crate) fn section(res: &mut Results, quick: bool, limit: Duration) {
    let loops: u64 = if quick { 2000 } else { 20_000 };
    let dir = std::env::temp_dir().join(format!("p2pmp-bench-ckpt-{}", std::process::id()));
    for n in [2u32, 8] {
        let row = format!("{n} ranks x {loops}");
        let ring = |mode: &str, env: &[(&str, String)]| -> Result<(f64, Vec<f64>), String> {
            let args = [mode.to_string(), loops.to_string()];
            let lines = run::p2pmp_env(n, &args, env, limit).map_err(|f| f.why)?;
            let time = run::values(&lines, "ring").first().map(|v| v[0]).ok_or("failed: no output")?;
            Ok((time, run::values(&lines, "snapshots").first().cloned().unwrap_or_default()))
        };
        let every = [("P2PMP_CHECKPOINT_MS", "1000".to_string()), ("P2PMP_CHECKPOINT_DIR", dir.display().to_string())];
        let runs =
            [("plain", ring("ring", &[])), ("snap", ring("ring_snap", &[])), ("ckpt1s", ring("ring_snap", &every))];
        for (name, r) in runs {
            res.put(
                "snap",
                &row,
                &format!("{name}_s"),
                &format!("ring_{n}x{loops}_s"),
                r.as_ref().map(|x| x.0).map_err(Clone::clone),
            );
            if name == "plain" {
                continue;
            }
            // The rank's own account: time inside snapshot a call, agreements run, checkpoints taken.
            let stat = |i: usize| {
                r.as_ref().map_err(Clone::clone).and_then(|x| x.1.get(i).copied().ok_or_else(|| "no stats".to_string()))
            };
            res.put("snap", &row, &format!("{name}_us"), &format!("us_a_call_{n}x{loops}"), stat(0));
            res.put("snap", &row, &format!("{name}_agree"), &format!("agreements_{n}x{loops}"), stat(1));
            if name == "ckpt1s" {
                res.put("snap", &row, "ckpt1s_taken", &format!("taken_{n}x{loops}"), stat(2));
            }
        }
    }
    if !quick {
        factor_rows(res, &dir, limit);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let raw_mib = if quick { 8 } else { 32 };
    for (name, data) in datasets(raw_mib << 20) {
        for codec in [Codec::Zstd, Codec::Gzip] {
            let (ratio, comp, decomp) = measure(codec, &data);
            let (c, key) = (codec.name(), name.split(' ').next().unwrap_or(name));
            res.put("codec", name, &format!("{c}_stored_pct"), key, Ok(ratio));
            res.put("codec", name, &format!("{c}_in_mbps"), key, Ok(comp));
            res.put("codec", name, &format!("{c}_out_mbps"), key, Ok(decomp));
        }
    }
}

/// Periodic checkpoints on the factoring job (2 ranks, K = 10,000; a safe
/// point every flag round): plain, safe points only, a checkpoint every 1 s,
/// 10 s and 60 s (s; the overhead is the difference from plain; the
/// checkpoints taken beside: the job takes a few seconds here, so the 10 s
/// and 60 s rows show what the safe points alone cost).
fn factor_rows(res: &mut Results, dir: &std::path::Path, limit: Duration) {
    let args = |mode: &str| [mode.to_string(), crate::SEMIPRIME.to_string(), "10000".to_string()];
    let row = "factoring, 2 ranks, K=10000";
    // (row, rank mode, checkpoint interval in ms)
    let runs = [
        ("plain", "factor", None),
        ("snap", "factor_snap", None),
        ("ckpt1s", "factor_snap", Some(1_000)),
        ("ckpt10s", "factor_snap", Some(10_000)),
        ("ckpt60s", "factor_snap", Some(60_000)),
    ];
    for (name, mode, every) in runs {
        let env: Vec<(&str, String)> = every.map_or_else(Vec::new, |ms: u64| {
            vec![("P2PMP_CHECKPOINT_MS", ms.to_string()), ("P2PMP_CHECKPOINT_DIR", dir.display().to_string())]
        });
        let lines = run::p2pmp_env(2, &args(mode), &env, limit).map_err(|f| f.why);
        let time = lines.as_ref().map_err(Clone::clone).and_then(|l| {
            run::values(l, "factor").first().map(|v| v[0]).ok_or_else(|| "failed: no output".to_string())
        });
        res.put("factor_ckpt", row, &format!("{name}_s"), "factor_2_k10000_s", time);
        if mode == "factor_snap" {
            let taken = lines.as_ref().map_err(Clone::clone).and_then(|l| {
                run::values(l, "snapshots").first().map(|v| v[0]).ok_or_else(|| "failed: no output".to_string())
            });
            res.put("factor_ckpt", row, &format!("{name}_taken"), "factor_2_k10000_taken", taken);
        }
    }
}

/// Stored size as a percentage of raw, compression and decompression speed
/// (MB/s of raw bytes; best of 3).
fn measure(codec: Codec, raw: &[u8]) -> (f64, f64, f64) {
    let (mut best_c, mut best_d, mut stored) = (f64::MAX, f64::MAX, Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        stored = compress(codec, raw).expect("compress");
        best_c = best_c.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let back = decompress(codec, &stored, raw.len() as u64).expect("decompress");
        best_d = best_d.min(t.elapsed().as_secs_f64());
        assert_eq!(back.len(), raw.len());
    }
    let mb = raw.len() as f64 / 1e6;
    (stored.len() as f64 * 100.0 / raw.len() as f64, mb / best_c, mb / best_d)
}

/// Arrays of `len` bytes of the kinds a checkpoint holds: a smooth f64 field (a
/// relaxed grid), the state of a search (u64 counters and flags), and noise.
fn datasets(len: usize) -> Vec<(&'static str, Vec<u8>)> {
    let n = len / 8;
    let side = (n as f64).sqrt() as usize;
    let field: Vec<u8> = (0..n)
        .flat_map(|i| {
            let (x, y) = ((i % side) as f64 / side as f64, (i / side) as f64 / side as f64);
            (300.0 + 50.0 * (3.0 * x).sin() * (2.0 * y).cos() + 0.5 * x * y).to_le_bytes()
        })
        .collect();
    let search: Vec<u8> =
        (0..n as u64).flat_map(|i| if i % 4 == 0 { (i * 7919 % 1_000_003).to_le_bytes() } else { [0; 8] }).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..n)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect();
    vec![("smooth f64 field", field), ("search state", search), ("random bytes", noise)]
}
