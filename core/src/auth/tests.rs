use proptest::prelude::*;

use super::*;
use crate::job::StagedFile;

fn secret(n: u8) -> SecretKey {
    SecretKey::from_seed([n; 32])
}

#[test]
fn a_key_prints_and_parses_back() {
    let k = secret(1).public();
    let text = k.to_string();
    assert!(text.starts_with("ed25519:") && text.len() == 8 + 64, "{text}");
    assert_eq!(PublicKey::parse(&text), Ok(k));
}

#[test]
fn key_text_is_parsed_strictly() {
    let good = secret(2).public().to_string();
    assert_eq!(PublicKey::parse(&good[8..]), Err(KeyError::Prefix));
    assert_eq!(PublicKey::parse(&good[..good.len() - 2]), Err(KeyError::Length(62)));
    assert_eq!(PublicKey::parse(&format!("{good}00")), Err(KeyError::Length(66)));
    assert_eq!(PublicKey::parse(&format!("{good} ")), Err(KeyError::Length(65)));
    let upper = format!("ed25519:{}", good[8..].to_uppercase());
    if upper != good {
        assert!(matches!(PublicKey::parse(&upper), Err(KeyError::NotHex { .. })));
    }
    let bad = format!("ed25519:g{}", &good[9..]);
    assert_eq!(PublicKey::parse(&bad), Err(KeyError::NotHex { at: 8 }));
    // Not every 32 bytes are a curve point; find one that is not.
    let off_curve = (0u8..=255)
        .map(|b| format!("ed25519:{}", format!("{b:02x}").repeat(32)))
        .find(|t| PublicKey::parse(t) == Err(KeyError::NotAKey));
    assert!(off_curve.is_some(), "some 32-byte pattern is no Ed25519 point");
}

#[test]
fn a_signed_request_verifies_and_any_change_breaks_it() {
    let s = SignedRequest::sign(&secret(3), 1_000, 42, b"kill job 7".to_vec());
    assert_eq!(s.verify(), Ok(()));
    let mut body = s.clone();
    body.body[0] ^= 1;
    let mut ts = s.clone();
    ts.timestamp_ms += 1;
    let mut nonce = s.clone();
    nonce.nonce += 1;
    let mut key = s.clone();
    key.key = secret(4).public();
    let mut sig = s.clone();
    sig.signature.0[1][3] ^= 0x80;
    for bad in [body, ts, nonce, key, sig] {
        assert!(matches!(bad.verify(), Err(AuthError::Signature(_))), "{bad:?}");
    }
}

#[test]
fn a_request_signature_is_no_job_signature() {
    let m = manifest(b"<p2pjob/>", &[("prog", b"ELF")], 0, 0);
    let job = JobAuth::sign(&secret(5), m.clone());
    assert_eq!(job.verify(&m.job_file), Ok(()));
    assert_eq!(job.verify(&Id::hash(b"<p2pjob>other</p2pjob>")), Err(AuthError::OtherJobFile));
    // The same key signing a request over the manifest's bytes yields no job signature.
    let req = SignedRequest::sign(&secret(5), 0, 0, m.signed_bytes());
    let forged = JobAuth { key: req.key, manifest: m.clone(), signature: req.signature };
    assert!(matches!(forged.verify(&m.job_file), Err(AuthError::Signature(_))));
}

#[test]
fn the_window_refuses_old_and_future_requests() {
    let mut g = ReplayGuard::default();
    let k = secret(6).public();
    let now = 10_000_000;
    assert!(matches!(g.check(now, k, now - REPLAY_WINDOW_MS - 1, 1), Err(AuthError::Stale { .. })));
    assert!(matches!(g.check(now, k, now + REPLAY_WINDOW_MS + 1, 2), Err(AuthError::Stale { .. })));
    assert_eq!(g.check(now, k, now - REPLAY_WINDOW_MS, 3), Ok(()));
    assert_eq!(g.check(now, k, now + REPLAY_WINDOW_MS, 4), Ok(()));
}

#[test]
fn a_nonce_is_taken_once_per_key_and_forgotten_after_the_window() {
    let mut g = ReplayGuard::default();
    let (a, b) = (secret(7).public(), secret(8).public());
    let now = 50_000_000;
    assert_eq!(g.check(now, a, now, 9), Ok(()));
    assert_eq!(g.check(now + 1, a, now, 9), Err(AuthError::Replayed));
    assert_eq!(g.check(now, b, now, 9), Ok(()), "another key's nonce 9 is another request");
    // Past the window the old entries go; the old request itself is stale by then.
    let later = now + REPLAY_WINDOW_MS + 1;
    assert!(matches!(g.check(later, a, now, 9), Err(AuthError::Stale { .. })));
    assert_eq!(g.check(later, a, later, 10), Ok(()));
    assert_eq!(g.len(), 1);
}

#[test]
fn a_full_guard_refuses_rather_than_forgets() {
    let mut g = ReplayGuard::new(1000, 3);
    let k = secret(9).public();
    for n in 0..3 {
        assert_eq!(g.check(5000, k, 5000, n), Ok(()));
    }
    assert_eq!(g.check(5000, k, 5000, 3), Err(AuthError::Busy));
    assert_eq!(g.check(5000, k, 5000, 0), Err(AuthError::Replayed));
    assert_eq!(g.check(6001, k, 6001, 3), Ok(()), "the old ones left the window");
}

#[test]
fn a_policy_runs_jobs_only_for_allowed_signed_keys() {
    let (alice, mallory) = (secret(10), secret(11));
    let m = manifest(b"job", &[("prog", b"ELF")], 1, 2);
    let digest = m.job_file;
    let p = Policy::keys([alice.public()], []);
    assert_eq!(p.admits("n", &digest, Some(&JobAuth::sign(&alice, m.clone()))), Ok(()));
    let refused = p.admits("n", &digest, Some(&JobAuth::sign(&mallory, m.clone()))).unwrap_err();
    assert_eq!(refused.to_string(), format!("node n does not allow key {}", mallory.public()));
    assert!(matches!(p.admits("n", &digest, None), Err(Refusal::Unsigned { .. })));
    let forged = JobAuth { key: alice.public(), ..JobAuth::sign(&mallory, m.clone()) };
    assert!(matches!(p.admits("n", &digest, Some(&forged)), Err(Refusal::BadSignature { .. })));
    let other = p.admits("n", &Id::hash(b"other job"), Some(&JobAuth::sign(&alice, m.clone())));
    assert!(matches!(other, Err(Refusal::BadSignature { error: AuthError::OtherJobFile, .. })), "{other:?}");
    let any = Policy { allow: Allow::AnyKey, admins: Default::default() };
    assert_eq!(any.admits("n", &digest, Some(&JobAuth::sign(&mallory, m))), Ok(()));
    assert!(any.admits("n", &digest, None).is_err());
    assert_eq!(Policy::open().admits("n", &digest, None), Ok(()));
}

/// A manifest of the job file `job` and the staged `files` (name, bytes).
fn manifest(job: &[u8], files: &[(&str, &[u8])], timestamp_ms: u64, nonce: u64) -> JobManifest {
    let files = (1u32..)
        .zip(files)
        .map(|(file, (name, data))| StagedFile {
            file,
            name: (*name).to_owned(),
            total: data.len() as u64,
            digest: Id::hash(data),
        })
        .collect();
    JobManifest { job_file: Id::hash(job), files, timestamp_ms, nonce }
}

#[test]
fn the_canonical_bytes_of_a_manifest_are_pinned() {
    let files = vec![StagedFile { file: 1, name: "ab".into(), total: 3, digest: Id::from_bytes([9; 20]) }];
    let m = JobManifest { job_file: Id::from_bytes([7; 20]), files, timestamp_ms: 5, nonce: 6 };
    let mut want = b"p2pmp job manifest v2\0".to_vec();
    want.extend([7; 20]);
    want.extend(1u32.to_be_bytes()); // one file
    want.extend(1u32.to_be_bytes()); // number 1
    want.extend(2u32.to_be_bytes()); // name of 2 bytes
    want.extend(b"ab");
    want.extend(3u64.to_be_bytes());
    want.extend([9; 20]);
    want.extend(5u64.to_be_bytes());
    want.extend(6u64.to_be_bytes());
    assert_eq!(m.signed_bytes(), want);
}

#[test]
fn a_job_signature_covers_every_staged_file_its_time_and_nonce() {
    let m = manifest(b"<p2pjob/>", &[("prog", b"ELF"), ("in.dat", b"data")], 1_000, 9);
    let s = JobAuth::sign(&secret(20), m.clone());
    assert_eq!(s.verify(&m.job_file), Ok(()), "a valid one");
    let mut tampered: Vec<JobAuth> = Vec::new();
    for change in 0..7 {
        let mut t = s.clone();
        let f = &mut t.manifest.files[change % 2];
        match change {
            0 | 1 => f.digest = Id::hash(b"other bytes"),
            2 => f.total += 1,
            3 => f.name = "prog2".into(),
            4 => t.manifest.timestamp_ms += 1,
            5 => t.manifest.nonce ^= 1,
            _ => t.manifest.files.pop().map_or((), drop),
        }
        tampered.push(t);
    }
    // Reordered after signing: the same entries in another order are other bytes.
    let mut reordered = s.clone();
    reordered.manifest.files.swap(0, 1);
    for (f, n) in reordered.manifest.files.iter_mut().zip(1..) {
        f.file = n;
    }
    tampered.push(reordered);
    for t in tampered {
        assert!(matches!(t.verify(&m.job_file), Err(AuthError::Signature(_))), "{t:?}");
    }
}

#[test]
fn a_manifest_out_of_staging_order_is_refused_even_when_signed() {
    let mut m = manifest(b"<p2pjob/>", &[("prog", b"ELF"), ("in.dat", b"data")], 1_000, 9);
    m.files.swap(0, 1);
    let s = JobAuth::sign(&secret(21), m.clone());
    assert_eq!(s.verify(&m.job_file), Err(AuthError::FileOrder { at: 1, file: 2 }));
    let mut gap = manifest(b"<p2pjob/>", &[("prog", b"ELF")], 1_000, 9);
    gap.files[0].file = 2;
    assert_eq!(
        JobAuth::sign(&secret(21), gap.clone()).verify(&gap.job_file),
        Err(AuthError::FileOrder { at: 1, file: 2 })
    );
}

#[test]
fn a_staged_file_is_held_to_the_signed_one_and_named_when_it_differs() {
    let m = manifest(b"<p2pjob/>", &[("prog", b"ELF"), ("in.dat", b"data")], 1_000, 9);
    let prog = m.files[0].clone();
    let job_file = StagedFile { file: 0, name: "job.xml".into(), total: 9, digest: m.job_file };
    assert_eq!(m.check(&prog), Ok(()));
    assert_eq!(m.check(&job_file), Ok(()));
    assert_eq!(m.check_count(3), Ok(()));
    let swapped = StagedFile { digest: Id::hash(b"EVIL"), ..prog.clone() };
    let err = m.check(&swapped).unwrap_err();
    assert!(matches!(err, FileMismatch::Digest { file: 1, .. }), "{err:?}");
    assert!(err.to_string().contains("\"prog\" (file 1)"), "{err}");
    assert!(matches!(m.check(&StagedFile { total: 4, ..prog.clone() }), Err(FileMismatch::Length { len: 4, .. })));
    assert!(matches!(m.check(&StagedFile { name: "x".into(), ..prog.clone() }), Err(FileMismatch::Name { .. })));
    assert!(matches!(m.check(&StagedFile { file: 3, ..prog }), Err(FileMismatch::Unsigned { file: 3, .. })));
    let other_job = StagedFile { digest: Id::hash(b"<p2pjob>x</p2pjob>"), ..job_file };
    assert!(matches!(m.check(&other_job), Err(FileMismatch::Digest { file: 0, .. })));
    assert_eq!(m.check_count(2), Err(FileMismatch::Count { count: 2, signed: 3 }));
}

#[test]
fn a_job_signature_is_fresh_only_in_the_window_and_taken_for_one_holder() {
    // Holders are the nodes offering the job (here numbered).
    let mut g: ReplayGuard<u32> = ReplayGuard::default();
    let k = secret(22).public();
    let now = 80_000_000;
    let stale = g.check_for(now, k, now - REPLAY_WINDOW_MS - 1, 1, 1);
    assert!(matches!(stale, Err(AuthError::Stale { .. })), "a stale timestamp");
    assert_eq!(g.check_for(now, k, now - 10, 2, 1), Ok(()), "a valid one");
    assert_eq!(g.check_for(now + 5, k, now - 10, 2, 1), Ok(()), "offered again by the node that offered it");
    assert_eq!(g.check_for(now + 5, k, now - 10, 2, 2), Err(AuthError::Replayed), "replayed by another node");
    assert_eq!(g.check_for(now + 5, secret(23).public(), now - 10, 2, 2), Ok(()), "another key's nonce 2");
    let later = now + REPLAY_WINDOW_MS;
    assert!(matches!(g.check_for(later, k, now - 10, 2, 1), Err(AuthError::Stale { .. })));
}

#[test]
fn a_job_signature_handed_over_to_the_deputy_is_the_deputy_s_to_offer() {
    let mut g: ReplayGuard<u32> = ReplayGuard::default();
    let (k, now) = (secret(22).public(), 80_000_000);
    assert_eq!(g.check_for(now, k, now - 10, 7, 1), Ok(()));
    // A hand-over by a node that did not hold it changes nothing.
    g.hand_over(7, &3, 4);
    assert_eq!(g.check_for(now, k, now - 10, 7, 4), Err(AuthError::Replayed));
    g.hand_over(7, &1, 2);
    assert_eq!(g.check_for(now, k, now - 10, 7, 2), Ok(()), "the deputy offers it again");
    assert_eq!(g.check_for(now, k, now - 10, 7, 1), Err(AuthError::Replayed), "the old holder no longer");
}

#[test]
fn a_deputy_the_holder_named_may_offer_the_job_signature_and_holds_it_then() {
    let mut g: ReplayGuard<u32> = ReplayGuard::default();
    let (k, now) = (secret(22).public(), 80_000_000);
    assert_eq!(g.check_for(now, k, now - 10, 7, 1), Ok(()));
    // Named by a node that does not hold it: nothing.
    g.name_deputies(7, &3, &[4]);
    assert_eq!(g.check_for(now, k, now - 10, 7, 4), Err(AuthError::Replayed));
    // Named by the holder: either deputy may offer it, and the first that
    // does holds it from then on.
    g.name_deputies(7, &1, &[2, 4]);
    assert_eq!(g.check_for(now, k, now - 10, 7, 4), Ok(()), "the second deputy took the job over");
    assert_eq!(g.check_for(now, k, now - 10, 7, 4), Ok(()), "and offers it again");
    assert_eq!(g.check_for(now, k, now - 10, 7, 2), Err(AuthError::Replayed), "named by the old holder only");
    assert_eq!(g.check_for(now, k, now - 10, 7, 1), Err(AuthError::Replayed), "the old holder no longer");
    // Once its holder is lost, the next node to present it holds it.
    g.holder_lost(&3);
    assert_eq!(g.check_for(now, k, now - 10, 7, 2), Err(AuthError::Replayed), "node 3 never held it");
    g.holder_lost(&4);
    assert_eq!(g.check_for(now, k, now - 10, 7, 5), Ok(()), "presented first after the holder was lost");
    assert_eq!(g.check_for(now, k, now - 10, 7, 2), Err(AuthError::Replayed), "then held by that node");
}

#[test]
fn a_manifest_decodes_only_within_its_bound_on_files() {
    let m = manifest(b"<p2pjob/>", &[("prog", b"ELF")], 3, 4);
    let bytes = postcard::to_allocvec(&m).unwrap();
    assert_eq!(postcard::from_bytes::<JobManifest>(&bytes), Ok(m.clone()));
    // As many files as a job may stage decode; one more does not.
    let file = |file| StagedFile { file, name: "f".into(), total: 1, digest: Id::ZERO };
    let mut full = JobManifest { files: (1..=MAX_MANIFEST_FILES as u32).map(file).collect(), ..m };
    let bytes = postcard::to_allocvec(&full).unwrap();
    assert_eq!(postcard::from_bytes::<JobManifest>(&bytes).map(|m| m.files.len()), Ok(MAX_MANIFEST_FILES));
    full.files.push(file(MAX_MANIFEST_FILES as u32 + 1));
    assert!(postcard::from_bytes::<JobManifest>(&postcard::to_allocvec(&full).unwrap()).is_err());
    // A declared count far past what the bytes hold is refused before anything is held.
    let huge = [&Id::ZERO.as_bytes()[..], &[0xff, 0xff, 0xff, 0xff, 0x0f]].concat();
    assert!(postcard::from_bytes::<JobManifest>(&huge).is_err());
}

#[test]
fn only_the_owner_or_an_admin_acts_on_a_job() {
    let (owner, other, admin) = (secret(12).public(), secret(13).public(), secret(14).public());
    let p = Policy::keys([owner, other], [admin]);
    assert!(p.may_act(Some(&owner), Some(&owner)));
    assert!(p.may_act(Some(&admin), Some(&owner)));
    assert!(!p.may_act(Some(&other), Some(&owner)));
    assert!(!p.may_act(None, Some(&owner)));
    assert!(!p.may_act(Some(&other), None));
    assert!(Policy::open().may_act(None, Some(&owner)));
}

proptest! {
    #[test]
    fn any_text_parses_without_panic_and_round_trips(s in "\\PC{0,80}") {
        if let Ok(k) = PublicKey::parse(&s) {
            prop_assert_eq!(k.to_string(), s);
        }
    }

    #[test]
    fn signatures_hold_exactly_for_what_was_signed(
        seed in any::<[u8; 32]>(), ts in any::<u64>(), nonce in any::<u64>(),
        body in proptest::collection::vec(any::<u8>(), 0..200), flip in any::<usize>(),
    ) {
        let s = SignedRequest::sign(&SecretKey::from_seed(seed), ts, nonce, body);
        prop_assert_eq!(s.verify(), Ok(()));
        let mut bad = s.clone();
        if bad.body.is_empty() { bad.nonce ^= 1 } else { let i = flip % bad.body.len(); bad.body[i] ^= 1 }
        prop_assert!(bad.verify().is_err());
    }

    #[test]
    fn the_guard_takes_each_pair_once_and_stays_bounded(
        reqs in proptest::collection::vec((0u8..4, 0u64..8, 0u64..3000), 0..200)
    ) {
        let mut g = ReplayGuard::new(1000, 16);
        let mut now = 0u64;
        let mut taken: std::collections::BTreeMap<(u8, u64), u64> = Default::default();
        for (who, nonce, step) in reqs {
            now += step / 10;
            let k = secret(who).public();
            let ts = now;
            let ok = g.check(now, k, ts, nonce).is_ok();
            if let Some(t) = taken.get(&(who, nonce)) {
                if now - t <= 1000 { prop_assert!(!ok, "replay within the window taken"); }
            }
            if ok { taken.insert((who, nonce), ts); }
            prop_assert!(g.len() <= 16);
        }
    }
}
