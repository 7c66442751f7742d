//! Who may run what, with real daemons: unsigned and foreign-key submissions
//! refused with their reason, a job matched onto the one node that allows its
//! key, a replayed signed request refused, someone else's job neither killed
//! nor read, a staged program other than the one signed refused by the
//! submitting node and, past a dishonest one, by every executor; across hosts
//! on the namespace cluster.

use std::cell::Cell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use p2pmp_core::auth::SecretKey;
use p2pmp_core::job::{JobDescription, JobId};
use p2pmp_core::node::control::{JobPhase, ToolReply, ToolRequest};
use p2pmp_jobd::client::sign;
use p2pmp_jobd::embedded::EmbeddedNet;
use p2pmp_jobd::{Client, keys};

/// A fresh key written to its own key file (for `p2pjob --key`).
fn key_file(name: &str) -> (SecretKey, PathBuf) {
    let dir = std::env::temp_dir().join(format!("p2pmp-auth-{}", std::process::id()));
    let path = dir.join(name);
    let key = keys::generate(&path, true).expect("writing a key file");
    (key, path)
}

/// An embedded network whose node `i` allows the keys `allow[i]`.
fn net(allow: &[Vec<String>]) -> EmbeddedNet {
    let i = Cell::new(0);
    let net = EmbeddedNet::start_with(allow.len(), 2, |c| {
        c.allow = allow[i.get()].clone();
        i.set(i.get() + 1);
    })
    .expect("starting the network");
    assert!(net.wait_formed(Duration::from_secs(30), |_| {}), "the overlay did not form");
    net
}

fn submit_req(program: &str, args: &[&str], watch: bool) -> ToolRequest {
    let desc = JobDescription::run(program, args.iter().map(|a| a.to_string()).collect(), 1);
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let nonce = (u64::from(std::process::id()) << 32) | NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ToolRequest::Submit { nonce, xml: desc.to_xml(), base_dir: "/tmp".into(), watch }
}

fn p2pjob(node: SocketAddr, key: &PathBuf, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_p2pjob"))
        .arg("--node")
        .arg(node.to_string())
        .arg("--key")
        .arg(key)
        .args(args)
        .output()
        .expect("running p2pjob")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Follows a watch to its end: the nodes ranks were placed on, and the end.
fn follow(c: &mut Client, id: u64) -> (Vec<SocketAddr>, JobPhase, Option<String>) {
    let mut placed = Vec::new();
    loop {
        let (rid, reply, _) = c.next(Some(Duration::from_secs(60))).expect("a reply");
        if rid != id {
            continue;
        }
        match reply {
            ToolReply::Placed { ranks, .. } => placed.extend(ranks.iter().map(|(_, n)| n.0)),
            ToolReply::Finished { phase, error, .. } => return (placed, phase, error),
            ToolReply::Error { message } => return (placed, JobPhase::Failed, Some(message)),
            _ => {}
        }
    }
}

#[test]
fn an_unsigned_submission_is_refused_with_the_reason() {
    let (a, _) = key_file("unsigned-a");
    let n = net(&[vec![a.public().to_string()]]);
    let mut c = Client::connect(n.control()).unwrap();
    let reply = {
        let id = c.send_as_is(submit_req("/bin/true", &[], false)).unwrap();
        loop {
            let (rid, r, _) = c.next(Some(Duration::from_secs(10))).unwrap();
            if rid == id {
                break r;
            }
        }
    };
    match reply {
        ToolReply::Error { message } => assert!(message.contains("unsigned request refused"), "{message}"),
        other => panic!("an unsigned submit was taken: {other:?}"),
    }
    // Signed by an allowed key, the same request runs.
    let mut c = Client::connect(n.control()).unwrap().with_key(a);
    let id = c.send(submit_req("/bin/true", &[], true)).unwrap();
    let (_, phase, error) = follow(&mut c, id);
    assert_eq!(phase, JobPhase::Done, "{error:?}");
}

#[test]
fn a_key_no_node_allows_is_refused_with_the_reason_and_exit_code_1() {
    let (a, _) = key_file("refused-a");
    let (b, b_file) = key_file("refused-b");
    let n = net(&[vec![a.public().to_string()], vec![a.public().to_string()]]);
    let out = p2pjob(n.control(), &b_file, &["run", "-n", "1", "/bin/true"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains(&format!("does not allow key {}", b.public())), "{err}");
    for addr in n.overlay_addrs() {
        assert!(err.contains(&format!("node {addr} does not allow key")), "each node says why: {err}");
    }
}

#[test]
fn a_job_is_matched_onto_the_one_node_that_allows_its_key() {
    let (a, _) = key_file("match-a");
    let (b, b_file) = key_file("match-b");
    let (ka, kb) = (a.public().to_string(), b.public().to_string());
    let n = net(&[vec![ka.clone()], vec![ka.clone()], vec![ka, kb]]);
    let only = n.overlay_addrs()[2];
    for _ in 0..3 {
        let mut c = Client::connect(n.control()).unwrap().with_key(b.clone());
        let id = c.send(submit_req("/bin/true", &[], true)).unwrap();
        let (placed, phase, error) = follow(&mut c, id);
        assert_eq!(phase, JobPhase::Done, "{error:?}");
        assert_eq!(placed.last(), Some(&only), "placed on {placed:?}");
    }
    let out = p2pjob(n.control(), &b_file, &["run", "-n", "1", "/bin/echo", "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("hello"));
}

#[test]
fn a_replayed_signed_request_is_refused() {
    let (a, _) = key_file("replay-a");
    let n = net(&[vec![a.public().to_string()]]);
    // One signed request, sent twice as the same bytes on two connections.
    let signed = sign(submit_req("/bin/true", &[], false), &a, now_ms(), 77).unwrap();
    let mut first = Client::connect(n.control()).unwrap();
    let got = first.call_as_is(signed.clone());
    assert!(matches!(got, ToolReply::Submitted { .. }), "{got:?}");
    let mut again = Client::connect(n.control()).unwrap();
    match again.call_as_is(signed) {
        ToolReply::Error { message } => assert!(message.contains("replayed"), "{message}"),
        other => panic!("a replay was taken: {other:?}"),
    }
    // Signed long ago: outside the window.
    let old = sign(submit_req("/bin/true", &[], false), &a, now_ms() - 10 * 60 * 1000, 78).unwrap();
    match Client::connect(n.control()).unwrap().call_as_is(old) {
        ToolReply::Error { message } => assert!(message.contains("off this node's clock"), "{message}"),
        other => panic!("a stale request was taken: {other:?}"),
    }
}

/// How a watched job ended.
struct Ended {
    phase: JobPhase,
    error: Option<String>,
    /// Whether any rank started.
    started: bool,
    /// What the ranks wrote.
    output: String,
}

/// Follows a watch to its end, keeping the output.
fn watch(c: &mut Client, id: u64) -> Ended {
    let mut end = Ended { phase: JobPhase::Failed, error: None, started: false, output: String::new() };
    loop {
        let (rid, reply, payload) = c.next(Some(Duration::from_secs(60))).expect("a reply");
        match reply {
            _ if rid != id => {}
            ToolReply::Started { .. } => end.started = true,
            ToolReply::Output { .. } => end.output.push_str(&text(&payload)),
            ToolReply::Finished { phase, error, .. } => return Ended { phase, error, ..end },
            ToolReply::Error { message } => return Ended { error: Some(message), ..end },
            _ => {}
        }
    }
}

#[test]
fn a_staged_program_other_than_the_signed_one_never_runs() {
    let (a, _) = key_file("files-a");
    let allow = vec![a.public().to_string()];
    // Node 0 forwards a signed job's files unchecked, as a dishonest node
    // would (test hook); node 1 checks them, as every jobd does.
    let dishonest = Cell::new(true);
    let n = EmbeddedNet::start_with(2, 1, |c| {
        c.allow = allow.clone();
        c.forward_unchecked = dishonest.replace(false);
    })
    .unwrap();
    assert!(n.wait_formed(Duration::from_secs(30), |_| {}), "the overlay did not form");
    let dir = std::env::temp_dir().join(format!("p2pmp-auth-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("prog.sh");
    let write_prog = |what: &str| {
        std::fs::write(&prog, format!("#!/bin/sh\necho {what}\n")).unwrap();
        std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    };
    let job = |nonce| {
        let xml = JobDescription::run("prog.sh", vec![], 1).to_xml();
        ToolRequest::Submit { nonce, xml, base_dir: dir.to_string_lossy().into_owned(), watch: true }
    };
    let (honest, forwarder) = (n.controls()[1], n.controls()[0]);

    // Signed as it is, the job runs.
    write_prog("signed");
    let mut c = Client::connect(honest).unwrap().with_key(a.clone());
    let id = c.send(job(1)).unwrap();
    let end = watch(&mut c, id);
    assert_eq!((end.phase, end.output.as_str()), (JobPhase::Done, "signed\n"), "{:?}", end.error);

    // The tool signs; then the program changes (same length, other bytes)
    // before the daemon reads it to stage it.
    let signed = sign(job(2), &a, now_ms(), 101).unwrap();
    let again = sign(job(3), &a, now_ms(), 102).unwrap();
    write_prog("forged");

    // The honest node finds the change itself: nothing is offered.
    let mut c = Client::connect(honest).unwrap();
    let id = c.send_as_is(signed).unwrap();
    let end = watch(&mut c, id);
    let error = end.error.unwrap_or_default();
    assert_eq!(end.phase, JobPhase::Failed, "{error}");
    assert!(error.contains("prog.sh") && error.contains("is not the file the job was signed with"), "{error}");
    assert!(!end.started && end.output.is_empty());

    // Past the dishonest node, every executor refuses the program, naming it,
    // and the reasons reach the submitter.
    let mut c = Client::connect(forwarder).unwrap();
    let id = c.send_as_is(again).unwrap();
    let end = watch(&mut c, id);
    let error = end.error.unwrap_or_default();
    assert_eq!(end.phase, JobPhase::Failed, "{error}");
    for node in n.overlay_addrs() {
        let why = format!("node {node} refused the job's files: \"prog.sh\" (file 1) has SHA-1");
        assert!(error.contains(&why), "{why:?} missing from: {error}");
    }
    assert!(error.contains("but the submitter signed"), "{error}");
    assert!(!end.started && !end.output.contains("forged"), "the forged program ran: {}", end.output);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn someone_elses_job_is_neither_killed_nor_read_but_its_owner_and_an_admin_may() {
    let (a, _) = key_file("owner-a");
    let (b, _) = key_file("other-b");
    let (admin, _) = key_file("admin-c");
    let allow = vec![a.public().to_string(), b.public().to_string()];
    let n = EmbeddedNet::start_with(2, 2, |c| {
        c.allow = allow.clone();
        c.admin = vec![admin.public().to_string()];
    })
    .unwrap();
    assert!(n.wait_formed(Duration::from_secs(30), |_| {}));
    let mut owner = Client::connect(n.control()).unwrap().with_key(a);
    let job = match owner.call(submit_req("/bin/sh", &["-c", "echo secret; sleep 30"], false), secs(10)).unwrap() {
        ToolReply::Submitted { job, .. } => job,
        other => panic!("not submitted: {other:?}"),
    };
    // Asked of the other node too: the request is forwarded, still refused.
    for ctl in n.controls() {
        let mut other = Client::connect(ctl).unwrap().with_key(b.clone());
        for req in
            [ToolRequest::Kill { job }, ToolRequest::Output { job, rank: None }, ToolRequest::Status { job: Some(job) }]
        {
            match other.call(req.clone(), secs(10)).unwrap() {
                ToolReply::Error { message } => {
                    assert!(message.contains("belongs to another key"), "{req:?}: {message}")
                }
                other => panic!("{req:?} of someone else's job answered: {other:?}"),
            }
        }
    }
    wait_output(&mut Client::connect(n.controls()[1]).unwrap().with_key(admin), job, "secret");
    match owner.call(ToolRequest::Kill { job }, secs(10)).unwrap() {
        ToolReply::Killing { .. } => {}
        other => panic!("the owner could not kill: {other:?}"),
    }
}

#[test]
fn a_daemon_on_a_non_loopback_address_needs_an_allow_list_and_bad_settings_exit_2_writing_nothing() {
    let jobd = PathBuf::from(env!("CARGO_BIN_EXE_jobd"));
    let work = std::env::temp_dir().join(format!("p2pmp-auth-refused-{}", std::process::id()));
    let open = ["--listen", "0.0.0.0:0", "--advertise", "127.0.0.1"];
    for (args, says) in [
        (&open[..], "refusing to start"),
        (&["--limit", "cpu=1"], "cpu"),
        (&["--overlay", "can", "--dims", "0"], "dims must be 1 to 8"),
        (&["--log-level", "loud"], "log level"),
        (&["--allow", "ed25519:xyz"], "allowed key"),
    ] {
        let out = Command::new(&jobd)
            .args(args)
            .args(["--control", "127.0.0.1:0", "--work-dir"])
            .arg(&work)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!work.exists(), "{args:?}: nothing is written before the configuration passes");
    }
}

#[test]
fn across_hosts_only_the_allowing_host_runs_a_key() {
    let Some(mut c) = p2pmp_tests::cluster::cluster_or_skip("auth_across_hosts", 3) else { return };
    let dir = std::env::temp_dir().join(format!("p2pmp-auth-hosts-{}", std::process::id()));
    let (b, b_file) = (keys::generate(&dir.join("b"), true).unwrap(), dir.join("b"));
    let (_, stranger) = (keys::generate(&dir.join("s"), true).unwrap(), dir.join("s"));
    let me = c.user_key();
    let kb = b.public().to_string();
    c.start_jobd(0, &[], &["--allow", &me]);
    c.start_jobd(1, &[0], &["--allow", &me]);
    c.start_jobd(2, &[0, 1], &["--allow", &me, "--allow", &kb]);
    std::thread::sleep(Duration::from_secs(4));
    let key = b_file.to_string_lossy().into_owned();
    let ok = c.p2pjob(0, &["--key", &key, "run", "-n", "2", "/bin/true"], secs(60));
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    let key = stranger.to_string_lossy().into_owned();
    let refused = c.p2pjob(0, &["--key", &key, "run", "-n", "1", "/bin/true"], secs(60));
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    assert!(refused.stderr.contains("does not allow key"), "{}", refused.stderr);
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Asks for `job`'s output until it shows `want` (the rank may not have printed yet).
fn wait_output(c: &mut Client, job: JobId, want: &str) {
    let deadline = Instant::now() + secs(30);
    loop {
        let id = c.send(ToolRequest::Output { job, rank: None }).unwrap();
        let mut seen = String::new();
        loop {
            let (rid, r, payload) = c.next(Some(secs(10))).unwrap();
            match r {
                _ if rid != id => {}
                ToolReply::Output { .. } => seen.push_str(&text(&payload)),
                ToolReply::Error { message } => panic!("an admin could not read the output: {message}"),
                r if r.ends_request() => break,
                _ => {}
            }
        }
        if seen.contains(want) {
            return;
        }
        assert!(Instant::now() < deadline, "no {want:?} in {seen:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
}
