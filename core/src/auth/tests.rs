use proptest::prelude::*;

use super::*;

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
    let digest = Id::hash(b"<p2pjob/>");
    let job = JobAuth::sign(&secret(5), &digest);
    assert_eq!(job.verify(&digest), Ok(()));
    assert!(job.verify(&Id::hash(b"<p2pjob>other</p2pjob>")).is_err());
    // The same key signing a request over the digest bytes yields no job signature.
    let req = SignedRequest::sign(&secret(5), 0, 0, digest.as_bytes().to_vec());
    assert!(JobAuth { key: req.key, signature: req.signature }.verify(&digest).is_err());
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
    let digest = Id::hash(b"job");
    let p = Policy::keys([alice.public()], []);
    assert_eq!(p.admits("n", &digest, Some(&JobAuth::sign(&alice, &digest))), Ok(()));
    let refused = p.admits("n", &digest, Some(&JobAuth::sign(&mallory, &digest))).unwrap_err();
    assert_eq!(refused.to_string(), format!("node n does not allow key {}", mallory.public()));
    assert!(matches!(p.admits("n", &digest, None), Err(Refusal::Unsigned { .. })));
    let forged = JobAuth { key: alice.public(), signature: JobAuth::sign(&mallory, &digest).signature };
    assert!(matches!(p.admits("n", &digest, Some(&forged)), Err(Refusal::BadSignature { .. })));
    let any = Policy { allow: Allow::AnyKey, admins: Default::default() };
    assert_eq!(any.admits("n", &digest, Some(&JobAuth::sign(&mallory, &digest))), Ok(()));
    assert!(any.admits("n", &digest, None).is_err());
    assert_eq!(Policy::open().admits("n", &digest, None), Ok(()));
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
