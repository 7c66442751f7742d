//! The status page's JSON API and event stream, on a real embedded network:
//! the documents match what `p2pjob status --json` and `p2pjob nodes --json`
//! print, and a job submitted meanwhile shows up, runs and ends, live.

mod web;

use std::collections::BTreeSet;
use std::time::Duration;

use p2pmp_core::job::JobDescription;
use serde_json::Value;

fn p2pjob(control: std::net::SocketAddr, args: &[&str]) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_p2pjob"))
        .args(["--node", &control.to_string(), "--json"])
        .args(args)
        .output()
        .expect("run p2pjob");
    assert!(out.status.success(), "p2pjob {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("p2pjob prints JSON")
}

/// The fields of `a` that `b` has, equal; `b` has no field `a` lacks.
fn same_fields(a: &Value, b: &Value, what: &str) {
    let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
    for (k, v) in b {
        assert_eq!(a.get(k), Some(v), "{what}: field {k}");
    }
}

#[test]
fn the_api_matches_p2pjob_and_follows_a_job_live() {
    let net = web::network(3);
    let page = net.http_addr().expect("the first daemon serves the page");
    assert!(page.ip().is_loopback());
    let control = net.control();
    // Nodes: every one, as p2pjob lists them (load and free memory move).
    let nodes = web::until(Duration::from_secs(10), "three nodes on the page", || {
        let v = web::get(page, "/api/nodes").json();
        (v["nodes"].as_array()?.len() == 3).then_some(v)
    });
    let listed = p2pjob(control, &["nodes"]);
    let addrs =
        |v: &Value| v["nodes"].as_array().unwrap().iter().map(|n| n["addr"].to_string()).collect::<BTreeSet<_>>();
    assert_eq!(addrs(&nodes), addrs(&listed));
    for (a, b) in nodes["nodes"].as_array().unwrap().iter().zip(listed["nodes"].as_array().unwrap()) {
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(a), keys(b));
        for k in ["addr", "os", "arch", "cores", "mem_mb", "slots_total", "tags", "attributes"] {
            assert_eq!(a[k], b[k], "node field {k}");
        }
        assert!(a["attributes"]["criu"].is_string(), "every node says whether it has criu: {a}");
    }
    // The ring: three nodes in id order; the page's own daemon tells its neighbours.
    let ring = web::until(Duration::from_secs(10), "the ring", || {
        let v = web::get(page, "/api/ring").json();
        (v["nodes"].as_array()?.len() == 3 && v["me"].is_string()).then_some(v)
    });
    let me = net.overlay_addrs()[0].to_string();
    assert_eq!(ring["me"], me.as_str());
    assert_eq!(web::get(page, "/api/daemon").json()["overlay_kind"], "chord");
    assert_eq!(web::get(page, "/api/zones").json()["nodes"], serde_json::json!([]), "Chord has no zones");
    for n in ring["nodes"].as_array().unwrap() {
        assert_eq!(n["source"] == "node", n["addr"] == me.as_str(), "{n}");
        assert_eq!(n["successors"].as_array().unwrap().len(), 2, "{n}");
    }
    // A job submitted while an event stream is open.
    let dir = std::env::temp_dir().join(format!("p2pmp-page-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = "echo hello $P2PMP_RANK; sleep 2; echo result > out.txt; echo bye $P2PMP_RANK";
    let mut desc = JobDescription::run("/bin/sh", vec!["-c".into(), script.into()], 2);
    desc.outputfiles.push("out.txt".into());
    let events = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            web::events(page, "/api/events", Duration::from_secs(40), |got| {
                got.iter().any(|(name, data)| name == "jobs" && data.contains("\"phase\":\"done\""))
            })
        });
        std::thread::sleep(Duration::from_millis(300));
        let job = web::submit(control, &desc, &dir);
        (job, reader.join().unwrap())
    });
    let (job, events) = events;
    let names: BTreeSet<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["daemon", "jobs", "nodes", "ring", "zones"]), "every document is sent");
    let phases: Vec<String> = events
        .iter()
        .filter(|(n, _)| n == "jobs")
        .filter_map(|(_, d)| {
            let v: Value = serde_json::from_str(d).ok()?;
            let j = v["jobs"].as_array()?.iter().find(|j| j["job"] == job.to_string().as_str())?.clone();
            Some(j["phase"].as_str()?.to_owned())
        })
        .collect();
    assert!(phases.iter().any(|p| p == "running"), "the stream showed it running: {phases:?}");
    assert_eq!(phases.last().map(String::as_str), Some("done"), "{phases:?}");
    // The job's document: its ranks, when it ran, the last lines, its files.
    let doc = web::get(page, &format!("/api/jobs/{job}"));
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    for rank in 0..2 {
        let lines: Vec<&str> =
            doc["tail"][rank.to_string()].as_array().unwrap().iter().filter_map(|l| l["line"].as_str()).collect();
        assert_eq!(lines, [format!("hello {rank}"), format!("bye {rank}")], "rank {rank}");
    }
    let t = &doc["times"];
    let (seen, ended) = (t["seen_ms"].as_u64().unwrap(), t["ended_ms"].as_u64().unwrap());
    assert!(seen <= ended && ended - seen >= 1000, "it ran about 2 s: {t}");
    let fetched = doc["transfers"]["fetching"].as_array().unwrap();
    assert_eq!(fetched.len(), 2, "{fetched:?}");
    assert!(fetched.iter().all(|f| f["done"] == f["total"] && f["total"] == 7), "{fetched:?}");
    // The job list is what p2pjob status --json says, plus what the page saw.
    let status = p2pjob(control, &["status"]);
    let api = web::get(page, "/api/jobs").json();
    assert_eq!(status["jobs"].as_array().unwrap().len(), api["jobs"].as_array().unwrap().len());
    same_fields(&api["jobs"][0], &status["jobs"][0], "job");
    same_fields(&doc, &status["jobs"][0], "one job");
    // Unknown and malformed ids, and nothing but reading.
    assert_eq!(web::get(page, &format!("/api/jobs/{}", "0".repeat(40))).status, 404);
    assert_eq!(web::get(page, "/api/jobs/nonsense").status, 400);
    assert_eq!(web::request(page, "POST", "/api/jobs", Some("{}")).unwrap().status, 405);
    let html = web::get(page, "/");
    assert!(html.status == 200 && html.body.contains("/app.js"));
    assert!(web::get(page, "/app.js").body.contains("EventSource"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A box's extent along dimension `k`: `[lo, hi)` as fractions.
fn side(z: &Value, k: usize) -> (f64, f64) {
    (z["lo"][k].as_f64().unwrap(), z["hi"][k].as_f64().unwrap())
}

#[test]
fn on_can_the_api_tells_every_nodes_zones_and_neighbours() {
    let net = web::network_over(4, Some(2));
    let page = net.http_addr().expect("the first daemon serves the page");
    let me = net.overlay_addrs()[0].to_string();
    let mut want: Vec<String> = net.overlay_addrs().iter().map(|a| a.to_string()).collect();
    want.sort();
    // Every node tells its zones; together they tile the square.
    let zones = web::until(Duration::from_secs(30), "four nodes' zones that tile the space", || {
        let v = web::get(page, "/api/zones").json();
        web::zones_settled(&v, 4).then_some(v)
    });
    assert_eq!((zones["me"].as_str(), zones["dims"].as_u64()), (Some(me.as_str()), Some(2)));
    let nodes = zones["nodes"].as_array().unwrap();
    let addrs: Vec<String> = nodes.iter().map(|n| n["addr"].as_str().unwrap().to_owned()).collect();
    assert_eq!(addrs, want, "every node, by address");
    let boxes: Vec<&Value> = nodes.iter().flat_map(|n| n["zones"].as_array().unwrap()).collect();
    for (i, a) in boxes.iter().enumerate() {
        for k in 0..2 {
            let (lo, hi) = side(a, k);
            assert!((0.0..1.0).contains(&lo) && lo < hi && hi <= 1.0, "{a}");
        }
        // No two boxes overlap (their areas then sum to one: a tiling).
        for b in &boxes[i + 1..] {
            let meet = (0..2).all(|k| side(a, k).0 < side(b, k).1 && side(b, k).0 < side(a, k).1);
            assert!(!meet, "{a} and {b} overlap");
        }
    }
    // Neighbours are nodes of the network, and mutual.
    for n in nodes {
        let mine = n["neighbours"].as_array().unwrap();
        assert!(!mine.is_empty(), "{n}");
        for other in mine {
            let o = nodes.iter().find(|m| m["addr"] == *other).unwrap_or_else(|| panic!("{other} is no node"));
            assert!(o["neighbours"].as_array().unwrap().contains(&n["addr"]), "{n} / {o}");
        }
    }
    let daemon = web::get(page, "/api/daemon").json();
    assert_eq!((daemon["overlay_kind"].as_str(), daemon["overlay"].as_str()), (Some("can"), Some(me.as_str())));
    // The ring stays served (computed from the node list), and so does the page.
    assert_eq!(web::get(page, "/api/ring").status, 200);
    let events = web::events(page, "/api/events", Duration::from_secs(10), |got| got.iter().any(|(n, _)| n == "zones"));
    let (_, data) = events.iter().find(|(n, _)| n == "zones").unwrap();
    assert_eq!(serde_json::from_str::<Value>(data).unwrap()["dims"], 2);
    assert!(web::get(page, "/app.js").body.contains("renderZones"));
}
