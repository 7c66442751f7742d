//! An executor node's checks of a signed offer: key, signature, freshness, and
//! a signature presented again by another node (a captured offer replayed).

use super::*;
use crate::auth::{JobAuth, JobManifest, SecretKey};
use crate::job::{JobId, JobMsg, RejectReason};

const NOW_MS: u64 = 1_700_000_000_000;

/// A node allowing `alice`, its wall clock at [`NOW_MS`].
fn executor(alice: &SecretKey, t0: Instant) -> DaemonNode {
    let mut cfg = DaemonConfig::new(resources(2), "127.0.0.1:9000", "/w", 1);
    cfg.auth = Policy::keys([alice.public()], []);
    cfg.unix_ms = NOW_MS;
    DaemonNode::new(cfg, NodeAddr::loopback(1, 7000), t0)
}

fn offer(secret: &SecretKey, job: JobId, timestamp_ms: u64) -> JobMsg {
    let digest = crate::id::Id::hash(b"<p2pjob/>");
    let manifest = JobManifest { job_file: digest, files: Vec::new(), timestamp_ms, nonce: 77 };
    JobMsg::SignedOffer { job, ranks: vec![0], size: 1, digest, auth: JobAuth::sign(secret, manifest) }
}

/// What the node answers `from` to `msg`.
fn answer(node: &mut DaemonNode, now: Instant, from: NodeAddr, msg: JobMsg) -> Vec<JobMsg> {
    node.handle_message(now, Envelope::new(from.id(), from, 0, NodeMsg::Job(msg)));
    std::iter::from_fn(|| node.poll_action())
        .filter_map(|a| match a {
            Action::Send { to, msg } if to == from => match msg.body {
                NodeMsg::Job(j) => Some(j),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn refusal(msgs: &[JobMsg]) -> String {
    match msgs {
        [JobMsg::Reject { reason: RejectReason::NotAllowed(why), .. }] => why.clone(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_captured_signed_offer_replayed_by_another_node_is_refused() {
    let t0 = Instant::now();
    let alice = SecretKey::from_seed([1; 32]);
    let mut node = executor(&alice, t0);
    while node.poll_action().is_some() {}
    let (honest, thief) = (NodeAddr::loopback(2, 7000), NodeAddr::loopback(3, 7000));
    let job = JobId::derive(honest, 1, 1);
    let signed = offer(&alice, job, NOW_MS - 1_000);
    assert!(matches!(answer(&mut node, t0, honest, signed.clone())[..], [JobMsg::Accept { .. }]));
    // The same node offering the same job again (placement tried again) is no replay.
    assert!(matches!(answer(&mut node, t0, honest, signed.clone())[..], [JobMsg::Accept { .. }]));
    let why = refusal(&answer(&mut node, t0, thief, signed));
    assert!(why.contains("replayed signature"), "{why}");
    // Under another wire id (a restart), the node that offered it may offer it again; the thief may not.
    let JobMsg::SignedOffer { auth, digest, .. } = offer(&alice, job, NOW_MS - 1_000) else { unreachable!() };
    let restart = JobMsg::SignedOffer { job: JobId::derive(honest, 2, 1), ranks: vec![0], size: 1, digest, auth };
    assert!(refusal(&answer(&mut node, t0, thief, restart.clone())).contains("replayed signature"));
    assert!(matches!(answer(&mut node, t0, honest, restart)[..], [JobMsg::Accept { .. }]));
}

#[test]
fn a_stale_job_signature_is_refused() {
    let t0 = Instant::now();
    let alice = SecretKey::from_seed([1; 32]);
    let mut node = executor(&alice, t0);
    while node.poll_action().is_some() {}
    let from = NodeAddr::loopback(2, 7000);
    let old = offer(&alice, JobId::derive(from, 1, 1), NOW_MS - crate::auth::JOB_SIGNATURE_WINDOW_MS - 1);
    let why = refusal(&answer(&mut node, t0, from, old));
    assert!(why.contains("refused the job's signature") && why.contains("off this node's clock"), "{why}");
    // The clock moves on with the node's: a fresh signature an hour later is taken.
    let later = t0 + Duration::from_secs(3600);
    let fresh = offer(&alice, JobId::derive(from, 2, 1), NOW_MS + 3_600_000);
    assert!(matches!(answer(&mut node, later, from, fresh)[..], [JobMsg::Accept { .. }]));
    // A job signed a day before it is offered (it waited for slots, or it
    // restarts) is taken: requests have minutes, job signatures days.
    let queued = offer(&alice, JobId::derive(from, 3, 1), NOW_MS + 3_600_000 - 24 * 3_600_000);
    assert!(matches!(answer(&mut node, later, from, queued)[..], [JobMsg::Accept { .. }]));
}
