//! p2pmp on many hosts: a cluster of network namespaces (see
//! `p2pmp_tests::cluster`), one `jobd` per host on its own address, jobs that
//! span hosts, controlled from any node. Skipped, with a message, where
//! namespaces cannot be made (not root, no iproute2 or nftables); CI sets
//! `P2PMP_REQUIRE_NETNS=1` so there they must run.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use p2pmp_tests::cluster::{Cluster, cluster_or_skip};

/// `target/<profile>`, with the programs this file runs freshly built.
fn built() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| p2pmp_tests::cargo_build(&[]))
}

fn ring() -> String {
    built().join("examples/mpi_ring").to_string_lossy().into_owned()
}

/// The flags every test daemon gets: quick maintenance (and one process slot
/// unless a test says otherwise).
const FAST: &[&str] = &["--stabilize-ms", "200", "--log-level", "info"];

/// A cluster of `n` hosts with a jobd on each, once the overlay lists them all.
fn cluster(test: &str, n: usize, extra: &[&str]) -> Option<Cluster> {
    built();
    let mut c = cluster_or_skip(test, n)?;
    let mut flags: Vec<&str> = FAST.iter().chain(extra).copied().collect();
    if !extra.contains(&"--slots") {
        flags.extend(["--slots", "1"]);
    }
    c.start_all(&flags);
    wait_for_nodes(&c, 0, n);
    Some(c)
}

/// A cluster of as many hosts as `slots`, host `i` offering `slots[i]`
/// process slots, with `extra` flags on every jobd.
fn cluster_with_slots(test: &str, slots: &[u32], extra: &[&str]) -> Option<Cluster> {
    if slots.iter().all(|s| *s == 1) {
        return cluster(test, slots.len(), extra);
    }
    built();
    let mut c = cluster_or_skip(test, slots.len())?;
    for (i, n) in slots.iter().enumerate() {
        let n = n.to_string();
        let flags: Vec<&str> = FAST.iter().chain(extra).copied().chain(["--slots", n.as_str()]).collect();
        let boot: Vec<usize> = if i == 0 { Vec::new() } else { vec![0, i - 1] };
        c.start_jobd(i, &boot, &flags);
    }
    wait_for_nodes(&c, 0, slots.len());
    Some(c)
}

/// Waits until `p2pjob nodes` on host `from` lists `n` nodes.
fn wait_for_nodes(c: &Cluster, from: usize, n: usize) {
    p2pmp_tests::wait_until(&format!("the overlay to list {n} nodes"), Duration::from_secs(30), || {
        let out = c.p2pjob(from, &["nodes"], Duration::from_secs(20));
        let listed = out.stdout.lines().filter(|l| l.starts_with("198.18.")).count();
        if listed == n { Ok(()) } else { Err(format!("{listed} listed: {} {}", out.stdout, out.stderr)) }
    })
}

/// Distinct nodes named in "placed rank(s) [..] on ADDR" lines.
fn placed_nodes(stderr: &str) -> Vec<String> {
    let mut v: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("placed rank(s) "))
        .filter_map(|l| l.split(" on ").nth(1))
        .map(str::to_owned)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn an_mpi_ring_spans_three_hosts() {
    let Some(c) = cluster("ring_spans_hosts", 3, &[]) else { return };
    ring_over_three_hosts(&c);
}

#[test]
fn an_mpi_ring_spans_three_hosts_over_can() {
    let Some(c) = cluster("ring_spans_hosts_can", 3, &["--overlay", "can", "--dims", "2"]) else { return };
    ring_over_three_hosts(&c);
}

/// A 3-rank MPI ring placed one rank per host.
fn ring_over_three_hosts(c: &Cluster) {
    let out = c.p2pjob(1, &["run", "-n", "3", &ring(), "500"], Duration::from_secs(60));
    assert!(out.ok, "stdout {} stderr {}\njobd0: {}", out.stdout, out.stderr, c.log(0));
    assert!(out.stdout.contains("[0] ring ok 500"), "{}", out.stdout);
    let nodes = placed_nodes(&out.stderr);
    assert_eq!(nodes.len(), 3, "one rank per host: {}", out.stderr);
    assert!(nodes.iter().all(|n| n.starts_with("198.18.0.")), "{nodes:?}");
}

/// Between hosts, rank-to-rank links are encrypted by default: a capture on
/// host 0's port of the bridge sees no 64 bytes of a message in any packet, while the same job
/// with encryption turned off (a wrapper sets `P2PMP_ENCRYPT=never`) shows
/// them, so the capture can fail.
#[test]
fn rank_traffic_between_hosts_is_encrypted_by_default() {
    let Some(c) = cluster("encrypted_between_hosts", 2, &[]) else { return };
    let sizes = built().join("examples/mpi_sizes").to_string_lossy().into_owned();
    let plain = write(&c, "plain.sh", &format!("#!/bin/sh\nP2PMP_ENCRYPT=never exec {sizes} \"$@\"\n"));
    let needle = p2pmp_tests::sniff::mpi_sizes_bytes(1000, 3)[400..464].to_vec();
    for (exe, in_clear) in [(&plain, true), (&sizes, false)] {
        let sniffer = p2pmp_tests::sniff::Sniffer::start_in(Some(c.switch_netns_path()), "h0", needle.clone())
            .expect("a capture on the switch (the cluster runs as root)");
        let out = c.p2pjob(0, &["run", "-n", "2", exe, "70000"], Duration::from_secs(60));
        let seen = sniffer.stop().expect("capture");
        assert!(out.ok && out.stdout.contains("[0] sizes ok 8"), "{exe}: {} {}", out.stdout, out.stderr);
        assert_eq!(placed_nodes(&out.stderr).len(), 2, "one rank per host: {}", out.stderr);
        assert!(seen.packets > 0, "nothing captured on host 0's port");
        assert_eq!(seen.matches > 0, in_clear, "{exe}: {seen:?}");
    }
}

/// Writes `name` in the cluster's scratch directory (executable when it is a script).
fn write(c: &Cluster, name: &str, text: &str) -> String {
    let p = c.dir.join(name);
    std::fs::write(&p, text).unwrap();
    if text.starts_with("#!") {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    p.to_string_lossy().into_owned()
}

fn job_file(c: &Cluster, name: &str, exe: &str, procs: u32, extra: &str) -> String {
    let xml = format!(
        "<?xml version=\"1.0\"?>\n<p2pjob>\n  <executable>{exe}</executable>\n{extra}  <processes>{procs}</processes>\n  \
         <requirement>Linux</requirement>\n  <requirement>x86</requirement>\n</p2pjob>\n"
    );
    write(c, name, &xml)
}

/// Submits `job` through host `i` without waiting; returns the job id.
fn submit(c: &Cluster, i: usize, job: &str) -> String {
    let out = c.p2pjob(i, &["submit", job], Duration::from_secs(20));
    assert!(out.ok, "submit: {} {}", out.stdout, out.stderr);
    out.stdout.trim().to_owned()
}

/// Polls `p2pjob status JOB` on host `i` until its line contains `want`.
fn wait_status(c: &Cluster, i: usize, job: &str, want: &str, limit: Duration) -> String {
    p2pmp_tests::wait_until(&format!("status of {job} on host {i} to show {want:?}"), limit, || {
        let s = c.p2pjob(i, &["status", job], Duration::from_secs(20));
        if s.stdout.contains(want) { Ok(s.stdout) } else { Err(format!("{} {}", s.stdout, s.stderr)) }
    })
}

#[test]
fn any_node_controls_any_job_and_a_late_wait_shows_all_output() {
    let Some(c) = cluster("control_anywhere", 4, &[]) else { return };
    // The classic requirements, in the thesis's spelling: "Linux" and "x86".
    let talk = write(
        &c,
        "talk.sh",
        "#!/bin/sh\nfor i in 1 2 3; do echo early $i; done\necho to stderr >&2\nsleep 3\necho late\n",
    );
    let job = job_file(&c, "talk.xml", &talk, 2, "");
    let id = submit(&c, 0, &job);
    let line = wait_status(&c, 2, &id, "2 running", Duration::from_secs(20));
    assert!(line.contains("(on 198.18.0.1:7400)"), "the holder is the submitting node: {line}");
    // Every node lists it among the network's jobs.
    let all = c.p2pjob(3, &["status"], Duration::from_secs(20));
    assert!(all.stdout.contains(&id), "{} {}", all.stdout, all.stderr);
    // Output so far, from another node.
    let so_far = c.p2pjob(3, &["output", &id], Duration::from_secs(20));
    assert!(so_far.ok, "{}", so_far.stderr);
    for rank in 0..2 {
        assert!(so_far.stdout.contains(&format!("[{rank}] early 3")), "{}", so_far.stdout);
        assert!(so_far.stderr.contains(&format!("[{rank}] to stderr")), "{}", so_far.stderr);
    }
    // A wait attached after the job printed shows everything from the start, then the rest.
    let w = c.p2pjob(1, &["wait", &id], Duration::from_secs(30));
    assert!(w.ok, "{} {}", w.stdout, w.stderr);
    for rank in 0..2 {
        for l in ["early 1", "early 2", "early 3", "late"] {
            let want = format!("[{rank}] {l}");
            assert_eq!(w.stdout.lines().filter(|x| *x == want).count(), 1, "{want} once in {}", w.stdout);
        }
    }
    assert!(w.stderr.contains(&format!("job {id} done")), "{}", w.stderr);
    // And so does a second wait, after the end; output of one rank comes raw.
    let again = c.p2pjob(2, &["wait", &id], Duration::from_secs(20));
    assert!(again.ok && again.stdout.contains("[1] late"), "{} {}", again.stdout, again.stderr);
    let raw = c.p2pjob(3, &["output", &id, "--rank", "1"], Duration::from_secs(20));
    assert_eq!(raw.stdout, "early 1\nearly 2\nearly 3\nlate\n");

    // Kill from a node that neither submitted nor runs it.
    let sleeper = job_file(&c, "sleep.xml", "/bin/sleep", 2, "  <arguments>300</arguments>\n");
    let id = submit(&c, 1, &sleeper);
    wait_status(&c, 0, &id, "2 running", Duration::from_secs(20));
    let k = c.p2pjob(3, &["kill", &id], Duration::from_secs(20));
    assert!(k.ok, "{} {}", k.stdout, k.stderr);
    let w = c.p2pjob(2, &["wait", &id], Duration::from_secs(20));
    assert_eq!(w.code, Some(4), "wait on a killed job exits 4: {}", w.stderr);
    // A job nobody knows is said to be unknown, from any node.
    let none = c.p2pjob(2, &["status", &"ab".repeat(20)], Duration::from_secs(20));
    assert_eq!(none.code, Some(3));
    assert!(none.stderr.contains("no job abab"), "{}", none.stderr);
}

/// Every process of a job named `tag` (its argument) on host `i`.
fn ranks_on(c: &Cluster, i: usize, tag: &str) -> usize {
    c.processes(i)
        .iter()
        .filter(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).is_ok_and(|l| l.contains(tag)))
        .count()
}

/// `<restart>scratch</restart>`: kill -9 of a host running a rank of an MPI
/// ring (not the submitting one) restarts the whole job on the hosts left,
/// and it completes with the ring's result; its status names the loss.
#[test]
fn a_job_that_restarts_from_scratch_survives_a_crashed_host() {
    let Some(mut c) = cluster("restart_scratch", 4, &["--heartbeat-ms", "250", "--failure-timeout-ms", "2000"]) else {
        return;
    };
    let tag = "3.141592";
    let script = write(&c, "late-ring.sh", &format!("#!/bin/sh\nsleep {tag}\nexec {} 300\n", ring()));
    let job = job_file(&c, "restart.xml", &script, 2, "  <restart>scratch</restart>\n");
    let id = submit(&c, 0, &job);
    wait_status(&c, 0, &id, "2 running", Duration::from_secs(20));
    // "running" comes as the script starts; its `sleep` (which carries the tag) a moment later.
    let victim =
        p2pmp_tests::wait_until("a rank on a host other than the submitter's", Duration::from_secs(10), || {
            (1..4).find(|&i| ranks_on(&c, i, tag) > 0).ok_or_else(|| "not yet".to_string())
        });
    c.crash(victim);
    let w = c.p2pjob(0, &["wait", &id], Duration::from_secs(60));
    assert!(w.ok, "the job did not survive host {victim}: {} {}", w.stdout, w.stderr);
    assert!(w.stdout.contains("[0] ring ok 300"), "{}", w.stdout);
    let lost = format!("node {}:7400 holding rank(s) [", c.hosts[victim].ip);
    // A wait attached after the restart is told of it too.
    assert!(w.stderr.contains(&format!("restarting from scratch: {lost}")), "{}", w.stderr);
    assert!(w.stderr.contains("(restart 1 of at most 3)"), "{}", w.stderr);
    let status = c.p2pjob(0, &["status", &id], Duration::from_secs(20));
    assert!(
        status.stdout.contains("done") && status.stdout.contains(&format!("restart 1: from scratch: {lost}")),
        "{}",
        status.stdout
    );
}

/// kill -9 of the submitting host under a running job whose ranks all run
/// on other hosts: the job's deputy (the node of rank 0) takes it over, the
/// ranks run on, and `p2pjob wait` and `status` from the other hosts find
/// the job there and collect the rest of it: the ring's result.
#[test]
fn a_job_outlives_its_submitting_host_and_other_hosts_collect_it() {
    built();
    let Some(mut c) = cluster_or_skip("submitter_dies", 4) else { return };
    // Hosts 1 to 3 are the workers the job asks for; host 0 only submits.
    for i in 0..4 {
        let mut flags: Vec<&str> = FAST.to_vec();
        flags.extend(["--slots", "1", "--heartbeat-ms", "250", "--failure-timeout-ms", "2000"]);
        if i > 0 {
            flags.extend(["--tag", "worker"]);
        }
        let boot: Vec<usize> = if i == 0 { Vec::new() } else { vec![0, i - 1] };
        c.start_jobd(i, &boot, &flags);
    }
    wait_for_nodes(&c, 0, 4);
    // The ring starts a moment after its ranks do: it runs once the
    // submitting host is gone, and its result goes to the deputy.
    let tag = "2.718281";
    let script = write(
        &c,
        "late-ring.sh",
        &format!("#!/bin/sh\necho \"rank $P2PMP_RANK up\"\nsleep {tag}\nexec {} 300\n", ring()),
    );
    let job = job_file(&c, "outlive.xml", &script, 3, "  <requirement>worker</requirement>\n");
    let id = submit(&c, 0, &job);
    wait_status(&c, 0, &id, "3 running", Duration::from_secs(20));
    // Once the submitting node has every rank's first line (its deputy gets
    // a copy as it comes), it dies.
    p2pmp_tests::wait_until("every rank's first line", Duration::from_secs(10), || {
        let out = c.p2pjob(0, &["output", &id], Duration::from_secs(20)).stdout;
        match out.matches(" up").count() {
            3 => Ok(()),
            n => Err(format!("{n} of 3: {out}")),
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    c.crash(0);
    let t0 = Instant::now();
    let w = c.p2pjob(1, &["wait", &id], Duration::from_secs(60));
    eprintln!("collected {:?} after the submitting host died: {}", t0.elapsed(), w.stderr.trim());
    assert!(w.ok, "the job did not outlive host 0: {} {}", w.stdout, w.stderr);
    assert!(w.stdout.contains("[0] ring ok 300"), "{}", w.stdout);
    // What the ranks printed before too: the deputy kept a copy.
    for rank in 0..3 {
        assert!(w.stdout.contains(&format!("[{rank}] rank {rank} up")), "{}", w.stdout);
    }
    for i in 1..4 {
        let status = c.p2pjob(i, &["status", &id], Duration::from_secs(20));
        assert!(status.ok && status.stdout.contains("done"), "host {i}: {} {}", status.stdout, status.stderr);
        if i == 3 {
            eprintln!("status from host 3:\n{}", status.stdout);
        }
        // Held by the deputy (rank 0's node), and, since it ended, by the
        // deputy's own deputy too, which answers for itself.
        let holder = status.stdout.split_once("(on ").and_then(|(_, r)| r.split_once(')')).map(|(a, _)| a);
        let rank0 = status.stdout.split_once("rank 0").and_then(|(_, r)| r.split_whitespace().nth(1));
        let me = format!("{}:7400", c.hosts[i].ip);
        assert!(holder.is_some() && (holder == rank0 || holder == Some(me.as_str())), "{}", status.stdout);
        assert_ne!(holder, Some(format!("{}:7400", c.hosts[0].ip).as_str()));
        assert_eq!(ranks_on(&c, i, tag), 0, "host {i} still runs a rank");
    }
}

/// A job ends while its submitting host lives; nobody has collected it when
/// that host is killed (-9): its deputy kept the results, so `p2pjob wait`,
/// `output` and `status` from another host get all of them, and the output
/// files are whole on the deputy's host.
#[test]
fn an_ended_jobs_results_wait_in_the_network_when_its_submitting_host_dies() {
    built();
    let Some(mut c) = cluster_or_skip("results_outlive", 4) else { return };
    for i in 0..4 {
        let mut flags: Vec<&str> = FAST.to_vec();
        flags.extend(["--slots", "1", "--heartbeat-ms", "250", "--failure-timeout-ms", "2000"]);
        if i > 0 {
            flags.extend(["--tag", "worker"]);
        }
        let boot: Vec<usize> = if i == 0 { Vec::new() } else { vec![0, i - 1] };
        c.start_jobd(i, &boot, &flags);
    }
    wait_for_nodes(&c, 0, 4);
    let script =
        write(&c, "answer.sh", "#!/bin/sh\necho \"rank $P2PMP_RANK says hi\"\necho \"answer $P2PMP_RANK\" > out.txt\n");
    let job = job_file(
        &c,
        "answer.xml",
        &script,
        3,
        "  <requirement>worker</requirement>\n  <outputfile>out.txt</outputfile>\n",
    );
    let id = submit(&c, 0, &job);
    let w = c.p2pjob(0, &["wait", &id], Duration::from_secs(60));
    assert!(w.ok, "{} {}", w.stdout, w.stderr);
    // Its deputy: rank 0's node, as the submitting host's status says.
    let status = c.p2pjob(0, &["status", &id], Duration::from_secs(20)).stdout;
    let rank0 = status.split_once("rank 0").and_then(|(_, r)| r.split_whitespace().nth(1)).unwrap().to_owned();
    let deputy = (1..4).find(|&i| rank0 == format!("{}:7400", c.hosts[i].ip)).expect("rank 0 on a worker");
    c.crash(0);
    let asker = if deputy == 3 { 2 } else { 3 };
    // Once the dead host is found out, any host collects the job.
    std::thread::sleep(Duration::from_millis(2500));
    let t0 = Instant::now();
    let w = c.p2pjob(asker, &["wait", &id], Duration::from_secs(60));
    eprintln!("collected {:?} after the submitting host died: {}", t0.elapsed(), w.stderr.trim());
    assert!(w.ok, "the results did not outlive host 0: {} {}", w.stdout, w.stderr);
    let out = c.p2pjob(asker, &["output", &id], Duration::from_secs(20));
    for rank in 0..3 {
        assert!(w.stdout.contains(&format!("[{rank}] rank {rank} says hi")), "{}", w.stdout);
        assert!(out.stdout.contains(&format!("[{rank}] rank {rank} says hi")), "{}", out.stdout);
        let file = c.hosts[deputy].work.join(format!("node-7400/adopted-{id}/out.txt.{rank}"));
        let got = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(got, format!("answer {rank}\n"));
    }
    let status = c.p2pjob(asker, &["status", &id], Duration::from_secs(20));
    assert!(status.ok && status.stdout.contains("done"), "{} {}", status.stdout, status.stderr);
    eprintln!("status from host {asker} after the submitting host died:\n{}", status.stdout);
}

/// kill -9 of the submitting host running a rank of a job with
/// `<restart>scratch</restart>`: the deputy takes the job over, finds the
/// rank lost with it, and starts the job again on the hosts left with the
/// files it read back from its own job directory; the ring completes and
/// another host collects it.
#[test]
fn a_job_restarts_at_its_deputy_when_the_submitting_host_dies_with_a_rank() {
    let Some(mut c) = cluster("submitter_rank_dies", 4, &["--heartbeat-ms", "250", "--failure-timeout-ms", "2000"])
    else {
        return;
    };
    let tag = "1.618033";
    let script = write(&c, "late-ring.sh", &format!("#!/bin/sh\nsleep {tag}\nexec {} 300\n", ring()));
    let job = job_file(&c, "restart.xml", &script, 3, "  <restart>scratch</restart>\n");
    let id = submit(&c, 0, &job);
    wait_status(&c, 0, &id, "3 running", Duration::from_secs(20));
    p2pmp_tests::wait_until("a rank on the submitting host", Duration::from_secs(10), || match ranks_on(&c, 0, tag) {
        0 => Err("not yet".to_owned()),
        _ => Ok(()),
    });
    // The deputy reads the job's files back as it is named: a moment.
    std::thread::sleep(Duration::from_millis(500));
    c.crash(0);
    let w = c.p2pjob(3, &["wait", &id], Duration::from_secs(60));
    eprintln!("{}", w.stderr.trim());
    assert!(w.ok, "the job did not survive host 0: {} {}", w.stdout, w.stderr);
    assert!(w.stdout.contains("[0] ring ok 300"), "{}", w.stdout);
    let status = c.p2pjob(3, &["status", &id], Duration::from_secs(20)).stdout;
    let lost = format!("restart 1: from scratch: node {}:7400 holding rank(s) [", c.hosts[0].ip);
    assert!(status.contains("done") && status.contains(&lost), "{status}");
    assert!(!status.contains(&format!("(on {}:7400)", c.hosts[0].ip)), "{status}");
}

/// What `ckpt LOOPS` on `size` ranks prints as its checksum when nothing
/// disturbs it: each rank folds the token it holds after every step (rank 0
/// `(i + 1) * size`, rank k `i * size + k + 1`) into 64 sums, hashes them,
/// and rank 0 adds the hashes up.
fn ckpt_checksum(loops: u64, size: u64) -> u64 {
    (0..size).fold(0u64, |all, rank| {
        let mut sum = [0u64; 64];
        for i in 0..loops {
            let token = if rank == 0 { (i + 1) * size } else { i * size + rank + 1 };
            let s = &mut sum[(i % 64) as usize];
            *s = s.wrapping_mul(31).wrapping_add(token);
        }
        all.wrapping_add(sum.iter().fold(0u64, |h, s| h.wrapping_mul(1_000_003).wrapping_add(*s)))
    })
}

/// `out`, the output of a `ckpt LOOPS` job of `size` ranks: `rank` resumed
/// mid-run and the job ended with the checksum of an undisturbed run.
fn assert_resumed_with_the_undisturbed_result(out: &str, loops: u64, size: u64, rank: u32) {
    let want = format!("ckpt: token {}, checksum {:x}", loops * size, ckpt_checksum(loops, size));
    assert!(out.contains(&want), "want {want:?} in:\n{out}");
    let resumed = resumed_at(out, rank).unwrap_or_else(|| panic!("rank {rank} never resumed: {out}"));
    assert!(resumed > 0 && resumed < loops, "resumed at {resumed}");
}

/// Where `rank` of a `ckpt` job resumed, as its output says.
fn resumed_at(out: &str, rank: u32) -> Option<u64> {
    let said = format!("[{rank}] resumed at iteration ");
    out.lines().find_map(|l| l.split_once(said.as_str()).and_then(|(_, i)| i.trim().parse().ok()))
}

/// The epoch of each rank's last checkpoint in a `p2pjob status` text (0: none yet).
fn checkpoint_epochs(status: &str) -> Vec<u64> {
    let rank_lines = status.lines().filter(|l| l.trim_start().starts_with("rank "));
    rank_lines
        .map(|l| {
            let after = l.split_once(" checkpoint epoch ").map_or("", |(_, rest)| rest);
            after.split(' ').next().and_then(|e| e.parse().ok()).unwrap_or(0)
        })
        .collect()
}

/// Submits the checkpointing ring `prog` of `loops` on `size` ranks through
/// host 0 (`<checkpoint>1s</checkpoint><restart>checkpoint</restart>`) and
/// waits until every rank has taken two cuts: its id.
fn ckpt_ring_with_two_cuts(c: &Cluster, prog: &str, loops: u64, size: u32) -> String {
    let extra =
        format!("  <arguments>{loops}</arguments>\n  <checkpoint>1s</checkpoint>\n  <restart>checkpoint</restart>\n");
    let job = job_file(c, "ckpt.xml", prog, size, &extra);
    let id = submit(c, 0, &job);
    wait_status(c, 0, &id, &format!("{size} running"), Duration::from_secs(20));
    wait_for_two_cuts(c, &id, size);
    id
}

/// Waits until every rank of `job` (`size` ranks, submitted through host 0)
/// has taken two cuts.
fn wait_for_two_cuts(c: &Cluster, job: &str, size: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = c.p2pjob(0, &["status", job], Duration::from_secs(20)).stdout;
        let epochs = checkpoint_epochs(&status);
        if epochs.len() == size as usize && epochs.iter().all(|e| *e >= 2) {
            return;
        }
        assert!(Instant::now() < deadline, "two cuts were never taken:\n{status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `<checkpoint>1s</checkpoint><restart>checkpoint</restart>`: kill -9 of
/// a host running a rank of the checkpointing ring, once every rank has
/// taken two cuts: the node holding the job kept them, every rank resumes
/// from the newest on the hosts left, and the job ends with the checksum of
/// an undisturbed run.
#[test]
fn a_job_that_restarts_from_its_checkpoint_survives_a_crashed_host_with_correct_results() {
    let Some(prog) = p2pmp_tests::c::ckpt_ring("c-tests-hosts") else { return };
    let Some(mut c) = cluster("restart_ckpt", 4, &["--heartbeat-ms", "250", "--failure-timeout-ms", "2000"]) else {
        return;
    };
    let loops: u64 = 9_137;
    let id = ckpt_ring_with_two_cuts(&c, &prog, loops, 2);
    // The files of the second cut reach the node holding the job a moment later.
    std::thread::sleep(Duration::from_millis(500));
    let victim = (1..4).find(|&i| ranks_on(&c, i, &loops.to_string()) > 0).expect("a rank off the submitter's host");
    c.crash(victim);
    let w = c.p2pjob(0, &["wait", &id], Duration::from_secs(90));
    assert!(w.ok, "the job did not survive host {victim}: {} {}", w.stdout, w.stderr);
    assert_resumed_with_the_undisturbed_result(&w.stdout, loops, 2, 0);
    let lost = format!("node {}:7400 holding rank(s) [", c.hosts[victim].ip);
    assert!(w.stderr.contains("restarting from checkpoint "), "{}", w.stderr);
    assert!(w.stderr.contains(&lost), "{}", w.stderr);
    let status = c.p2pjob(0, &["status", &id], Duration::from_secs(20)).stdout;
    assert!(status.contains("done") && status.contains("restart 1: from checkpoint "), "{status}");
    assert!(status.contains("recovered from epoch "), "{status}");
}

/// Asks for a checkpoint of `job` through host 0 until every rank took it
/// (the ranks may not have registered with their nodes yet): its epoch.
fn checkpoint_now(c: &Cluster, job: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ck = c.p2pjob(0, &["checkpoint", job], Duration::from_secs(60));
        let epoch = ck.stdout.split_once("checkpoint epoch ").and_then(|(_, e)| e.split(' ').next()?.parse().ok());
        if let Some(epoch) = epoch.filter(|_| ck.ok) {
            return epoch;
        }
        assert!(Instant::now() < deadline, "no checkpoint was taken: {} {}", ck.stdout, ck.stderr);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A damaged stored checkpoint: two cuts of the checkpointing ring asked
/// for (no interval, so no newer one follows), then the newest copy of rank
/// 0's file at the node holding the job rots on disk, and a host running a
/// rank dies (kill -9). Reading the cut back, that node finds the damage,
/// drops the cut and restarts the job from the one before it; the job ends
/// with the checksum of an undisturbed run.
#[test]
fn a_damaged_stored_cut_is_detected_and_the_job_restarts_from_the_cut_before_it() {
    let Some(prog) = p2pmp_tests::c::ckpt_ring("c-tests-hosts") else { return };
    let Some(mut c) = cluster("damaged_cut", 4, &["--heartbeat-ms", "250", "--failure-timeout-ms", "2000"]) else {
        return;
    };
    let loops: u64 = 20_011;
    let extra = format!("  <arguments>{loops}</arguments>\n  <restart>checkpoint</restart>\n");
    let job = job_file(&c, "ckpt.xml", &prog, 2, &extra);
    let id = submit(&c, 0, &job);
    wait_status(&c, 0, &id, "2 running", Duration::from_secs(20));
    let (older, newer) = (checkpoint_now(&c, &id), checkpoint_now(&c, &id));
    assert!(older < newer, "{older} then {newer}");
    // Both ranks' files of both cuts reach the node holding the job.
    let cuts = c.hosts[0].work.join(format!("node-7400/cuts-{id}"));
    let file = |rank: u32, epoch: u64| cuts.join(format!("rank-{rank}.{epoch}.ckpt"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while ![(0, older), (1, older), (0, newer), (1, newer)].iter().all(|&(r, e)| file(r, e).exists()) {
        assert!(Instant::now() < deadline, "the cuts never reached host 0: {:?}", std::fs::read_dir(&cuts));
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let damaged = file(0, newer);
    let mut bytes = std::fs::read(&damaged).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 0x5a;
    std::fs::write(&damaged, bytes).unwrap();

    let victim = (1..4).find(|&i| ranks_on(&c, i, &loops.to_string()) > 0).expect("a rank off the submitter's host");
    c.crash(victim);
    let w = c.p2pjob(0, &["wait", &id], Duration::from_secs(90));
    assert!(w.ok, "the job did not survive host {victim}: {} {}", w.stdout, w.stderr);
    let said = format!("restarting from checkpoint {older}: checkpoint {newer} is damaged (rank 0's file ");
    assert!(w.stderr.contains(&said), "want {said:?} in:\n{}", w.stderr);
    let want = format!("ckpt: token {}, checksum {:x}", loops * 2, ckpt_checksum(loops, 2));
    assert!(w.stdout.contains(&want), "want {want:?} in:\n{}", w.stdout);
    let status = c.p2pjob(0, &["status", &id], Duration::from_secs(20)).stdout;
    assert!(status.contains(&format!("recovered from epoch {older}")), "{status}");
}

/// As above, but kill -9 of the submitting host, which runs rank 0 and
/// holds the job: its deputy, which kept a copy of every cut, takes the job
/// over and restarts it from the newest cut on the hosts left; the job ends
/// with the checksum of an undisturbed run, collected from another host.
#[test]
fn a_job_restarts_from_the_cut_its_deputy_kept_when_the_submitting_host_dies() {
    let Some(prog) = p2pmp_tests::c::ckpt_ring("c-tests-hosts") else { return };
    let Some(mut c) = cluster("deputy_ckpt", 4, &["--heartbeat-ms", "250", "--failure-timeout-ms", "2000"]) else {
        return;
    };
    let loops: u64 = 9_091;
    let id = ckpt_ring_with_two_cuts(&c, &prog, loops, 2);
    assert!(ranks_on(&c, 0, &loops.to_string()) > 0, "the submitting host runs a rank");
    // The files of the second cut reach the node holding the job, and its
    // deputy, a moment later.
    std::thread::sleep(Duration::from_millis(800));
    c.crash(0);
    let w = c.p2pjob(3, &["wait", &id], Duration::from_secs(90));
    assert!(w.ok, "the job did not survive host 0: {} {}", w.stdout, w.stderr);
    assert_resumed_with_the_undisturbed_result(&w.stdout, loops, 2, 1);
    let status = c.p2pjob(3, &["status", &id], Duration::from_secs(20)).stdout;
    let lost = format!("node {}:7400 holding rank(s) [0]", c.hosts[0].ip);
    assert!(status.contains("done") && status.contains("restart 1: from checkpoint "), "{status}");
    assert!(status.contains(&lost), "{status}");
}

/// The hosts of every rank in a `p2pjob status JOB` text, by rank.
fn rank_hosts(c: &Cluster, status: &str) -> Vec<usize> {
    let rank_lines = status.lines().filter(|l| l.trim_start().starts_with("rank "));
    rank_lines
        .filter_map(|l| {
            let node = l.split_whitespace().skip_while(|w| *w != "on").nth(1)?;
            (0..c.hosts.len()).find(|&i| node == format!("{}:7400", c.hosts[i].ip))
        })
        .collect()
}

/// The submitter's node and the guardian's at once: kill -9 of the
/// submitting host (it runs rank 0 and holds the job) and of its first
/// deputy together, under the checkpointing ring on three ranks. The second
/// deputy, which kept a copy of every cut too, takes the job over and
/// restarts it from the newest cut on the hosts left; the job ends with the
/// checksum of an undisturbed run, collected from another host. Six hosts:
/// the first deputy may see host 0 die, take the job over and offer it to a
/// free host before it dies itself, and that host may refuse the second
/// deputy's offer as a replay if it has not yet found the first deputy lost
/// (see `auth::replay`); a spare host takes the rank then.
#[test]
fn a_job_restarts_at_its_second_deputy_when_the_submitting_host_and_the_first_die_together() {
    let Some(prog) = p2pmp_tests::c::ckpt_ring("c-tests-hosts") else { return };
    let Some(mut c) = cluster("deputies_ckpt", 6, &["--heartbeat-ms", "250", "--failure-timeout-ms", "2000"]) else {
        return;
    };
    let loops: u64 = 9_001;
    let id = ckpt_ring_with_two_cuts(&c, &prog, loops, 3);
    let status = c.p2pjob(0, &["status", &id], Duration::from_secs(20)).stdout;
    let hosts = rank_hosts(&c, &status);
    assert_eq!(hosts.len(), 3, "{status}");
    assert_eq!(hosts[0], 0, "the submitting host runs rank 0: {status}");
    // The deputies: the hosts of the lowest ranks off the submitting host.
    let (first, second) = (hosts[1], hosts[2]);
    // The files of the second cut reach the node holding the job, and its
    // deputies, a moment later.
    std::thread::sleep(Duration::from_millis(800));
    c.crash(0);
    c.crash(first);
    let asker = (1..6).find(|i| *i != first && *i != second).unwrap();
    let w = c.p2pjob(asker, &["wait", &id], Duration::from_secs(90));
    eprintln!("{}", w.stderr.trim());
    assert!(w.ok, "the job did not survive hosts 0 and {first}: {} {}", w.stdout, w.stderr);
    assert_resumed_with_the_undisturbed_result(&w.stdout, loops, 3, 0);
    let status = c.p2pjob(asker, &["status", &id], Duration::from_secs(20)).stdout;
    assert!(status.contains("done") && status.contains("restart 1: from checkpoint "), "{status}");
    // Held by the second deputy, and, since it ended, by its own deputies
    // too, among them maybe the host asked.
    let on = |i: usize| status.contains(&format!("(on {}:7400)", c.hosts[i].ip));
    assert!(on(second) || on(asker), "{status}");
}

/// The process of `rank` of the job run with `tag` in its command line:
/// its host and pid.
fn rank_process(c: &Cluster, rank: u32, tag: &str) -> Option<(usize, u32)> {
    let want = format!("P2PMP_RANK={rank}");
    (0..c.hosts.len()).find_map(|i| {
        c.processes(i).into_iter().find_map(|p| {
            let tagged = std::fs::read_to_string(format!("/proc/{p}/cmdline")).is_ok_and(|l| l.contains(tag));
            let env = std::fs::read(format!("/proc/{p}/environ")).unwrap_or_default();
            let ranked = env.split(|b| *b == 0).any(|v| v == want.as_bytes());
            (tagged && ranked).then_some((i, p))
        })
    })
}

/// `p2pjob migrate JOB RANK`, twice, from a node that neither holds nor
/// runs the job, while the checkpointing ring runs (`<restart>fail</restart>`,
/// no interval: only the migrations take cuts): each time rank 1 moves
/// alone to a host that runs no rank (the second time to one named), rank
/// 0 goes on in the same process, never rolled back, and the job ends with
/// the checksum of an undisturbed run. Each rank appends a line to its
/// output file every 500 iterations: rank 1's comes back whole, the lines
/// written on each of its three hosts in one file, none missing or repeated.
#[test]
fn a_rank_migrated_twice_mid_run_moves_alone_and_ends_with_the_undisturbed_result() {
    let Some(prog) = p2pmp_tests::c::ckpt_ring("c-tests-hosts") else { return };
    let Some(c) = cluster("migrate", 4, &["--heartbeat-ms", "250"]) else { return };
    let (loops, every): (u64, u64) = (9_241, 500);
    let (out, dir) = move_rank_1_twice(&c, &prog, &format!("{loops} -1 {every}"), &["trace.txt"]);
    assert_resumed_with_the_undisturbed_result(&out, loops, 2, 1);
    assert_eq!(resumed_at(&out, 0), None, "rank 0 never resumed: {out}");
    for rank in 0..2 {
        let path = dir.join(format!("trace.txt.{rank}"));
        let trace = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let want: String = (1..=loops / every).map(|k| format!("rank {rank} iteration {}\n", k * every)).collect();
        assert_eq!(trace, want, "rank {rank}'s trace, written before and after its moves");
    }
}

/// The same with the factoring job (a safe point every round of K
/// candidates, the next candidate and the factor found protected): rank 1
/// moves twice mid-run, alone, and the job finds the factors an undisturbed
/// run finds.
#[test]
fn a_factoring_rank_migrated_twice_mid_run_finds_the_same_factors() {
    let Some(prog) = p2pmp_tests::c::ckpt_factor("c-tests-hosts") else { return };
    let Some(c) = cluster("migrate_factor", 4, &["--heartbeat-ms", "250"]) else { return };
    // Two primes near 2^31 (the demo's number): 4 to 10 s of trial division on 2 ranks.
    let (out, _) = move_rank_1_twice(&c, &prog, "4611686039902224373 20000", &[]);
    assert!(out.contains("[0] factor: 4611686039902224373 = 2147483647 x 2147483659"), "{out}");
    assert!(out.contains("[1] resumed at candidate "), "{out}");
    assert!(!out.contains("[0] resumed"), "rank 0 never resumed: {out}");
}

/// Submits `prog` with `args` (whose first word tags its processes) as a
/// 2-rank job on host 0 of `c`, moves rank 1 twice mid-run with `p2pjob
/// migrate` from host 3 (the second time `--to` the highest host without a
/// rank), checking each time that it moved alone: to a host running no
/// rank, rank 0 in the same process, nothing rolled back. The job's output,
/// and the directory its `outputs` (output files) came back to.
fn move_rank_1_twice(c: &Cluster, prog: &str, args: &str, outputs: &[&str]) -> (String, std::path::PathBuf) {
    let tag = args.split(' ').next().unwrap_or(args);
    let files: String = outputs.iter().map(|f| format!("  <outputfile>{f}</outputfile>\n")).collect();
    let job = job_file(c, "migrate.xml", prog, 2, &format!("  <arguments>{args}</arguments>\n{files}"));
    let t0 = Instant::now();
    let id = submit(c, 0, &job);
    wait_status(c, 0, &id, "2 running", Duration::from_secs(30));
    let rank0 = p2pmp_tests::wait_until("rank 0's process", Duration::from_secs(20), || {
        rank_process(c, 0, tag).ok_or_else(|| "not yet".to_owned())
    });
    for round in 1..=2 {
        // Every rank registers with its node before it can be asked.
        let (from, _) = p2pmp_tests::wait_until("rank 1's process", Duration::from_secs(20), || {
            rank_process(c, 1, tag).ok_or_else(|| "not yet".to_owned())
        });
        // Mid-run: some of the job's seconds (4 to 10 here) go by first,
        // fewer before the second move, so both land before it ends.
        std::thread::sleep(Duration::from_millis(if round == 1 { 1500 } else { 500 }));
        let to = (round == 2).then(|| (0..4).rev().find(|&i| i != from && i != rank0.0).expect("a free host"));
        let target = to.map(|i| format!("{}:7400", c.hosts[i].ip));
        let mut args = vec!["migrate", id.as_str(), "1"];
        args.extend(target.iter().flat_map(|t| ["--to", t.as_str()]));
        // A rank is asked once it has connected to its node: until then the
        // request reaches no rank, and is asked again.
        let m = p2pmp_tests::wait_until("a migration", Duration::from_secs(20), || {
            let m = c.p2pjob(3, &args, Duration::from_secs(60));
            match m.ok {
                true => Ok(m),
                false if m.stderr.contains("reached no rank") => Err(m.stderr),
                false => panic!("round {round}: {} {}", m.stdout, m.stderr),
            }
        });
        let off = format!("rank 1 of job {id} moved off node {}:7400 to node ", c.hosts[from].ip);
        assert!(m.stdout.contains("moving rank 1 of job ") && m.stdout.contains(&off), "{}", m.stdout);
        assert!(m.stdout.contains("the other ranks went on"), "{}", m.stdout);
        let (now_on, _) = p2pmp_tests::wait_until("rank 1 running again", Duration::from_secs(20), || {
            rank_process(c, 1, tag).filter(|(h, _)| *h != from).ok_or_else(|| "not yet".to_owned())
        });
        assert_ne!(now_on, rank0.0, "rank 1 went to a host running no rank");
        if let (Some(i), Some(t)) = (to, &target) {
            assert_eq!(now_on, i, "rank 1 went to the host named");
            assert!(m.stdout.contains(&format!("to node {t}")), "{}", m.stdout);
        }
        let status = c.p2pjob(0, &["status", &id], Duration::from_secs(20)).stdout;
        assert!(status.contains(&format!("move {round}: rank 1 moved off node ")), "{status}");
        assert!(!status.contains("restart "), "nothing rolled back: {status}");
        assert_eq!(rank_process(c, 0, tag), Some(rank0), "rank 0 runs on in the same process");
        eprintln!("round {round}: rank 1 moved from host {from} to host {now_on} at {:?}", t0.elapsed());
    }
    let w = c.p2pjob(1, &["wait", &id], Duration::from_secs(90));
    assert!(w.ok, "{} {}", w.stdout, w.stderr);
    eprintln!("rank 1 moved twice; the job took {:?} in all", t0.elapsed());
    let dir = std::path::Path::new(&job).parent().expect("the job file's directory").to_owned();
    (w.stdout, dir)
}

/// What [`stop_daemons_under_the_ring`] saw: the cluster, the hosts stopped,
/// the ranks that ran on them, the job's status text and its output.
struct Stopped {
    c: Cluster,
    victims: Vec<usize>,
    ranks: Vec<u32>,
    status: String,
    out: String,
}

/// Runs the checkpointing ring (`ranks` ranks, `loops` loops) on a cluster
/// of hosts offering `slots` slots each, then SIGTERMs together the daemons
/// of `stopped` hosts running at least `per_host` of its ranks each (never
/// the submitter's): each must wait for its ranks to move, and the job must
/// end with the checksum of an undisturbed run (`None`: skipped).
fn stop_daemons_under_the_ring(
    test: &str,
    slots: &[u32],
    (ranks, loops): (u32, u64),
    (stopped, per_host): (usize, usize),
) -> Option<Stopped> {
    let prog = p2pmp_tests::c::ckpt_ring("c-tests-hosts")?;
    let hosts = slots.len();
    let mut c = cluster_with_slots(test, slots, &["--heartbeat-ms", "250"])?;
    let tag = loops.to_string();
    let job = job_file(&c, &format!("{test}.xml"), &prog, ranks, &format!("  <arguments>{loops}</arguments>\n"));
    // Placement breaks ties between nodes with as many slots granted by their
    // advertised load, which moves from sample to sample: a placement that
    // gives too few hosts enough ranks is killed and the job submitted again.
    let victims_of = |hosts_of: &[usize]| -> Vec<usize> {
        (1..hosts).filter(|i| hosts_of.iter().filter(|h| *h == i).count() >= per_host).take(stopped).collect()
    };
    let mut placed = None;
    for attempt in 0..4 {
        let id = submit(&c, 0, &job);
        wait_status(&c, 0, &id, &format!("{ranks} running"), Duration::from_secs(30));
        std::thread::sleep(Duration::from_secs(2));
        let hosts_of: Vec<usize> = (0..ranks)
            .map(|r| {
                let found = || rank_process(&c, r, &tag).map(|(h, _)| h).ok_or_else(|| "not yet".to_owned());
                p2pmp_tests::wait_until(&format!("rank {r}'s process"), Duration::from_secs(20), found)
            })
            .collect();
        if victims_of(&hosts_of).len() == stopped {
            placed = Some((id, hosts_of));
            break;
        }
        eprintln!("attempt {attempt}: ranks on hosts {hosts_of:?}, fewer than {stopped} with {per_host}; again");
        assert!(c.p2pjob(0, &["kill", &id], Duration::from_secs(20)).ok, "kill {id}");
        wait_status(&c, 0, &id, "killed", Duration::from_secs(30));
        p2pmp_tests::wait_until("the killed ring's processes to go", Duration::from_secs(20), || {
            match (0..ranks).find(|r| rank_process(&c, *r, &tag).is_some()) {
                None => Ok(()),
                Some(r) => Err(format!("rank {r} still runs")),
            }
        });
    }
    let (id, hosts_of) = placed.expect("a placement with the ranks the test stops, in 4 attempts");
    let victims = victims_of(&hosts_of);
    let moved = (0..ranks).filter(|r| victims.contains(&hosts_of[*r as usize])).collect();
    let took = c.terminate_together(&victims, Duration::from_secs(45));
    eprintln!("jobd on hosts {victims:?} exited {took:?} after SIGTERM");
    for &v in &victims {
        assert!(c.log(v).contains("waiting for ranks to move to other nodes before stopping"), "{}", c.log(v));
    }
    let w = c.p2pjob(0, &["wait", &id], Duration::from_secs(90));
    assert!(w.ok, "{} {}", w.stdout, w.stderr);
    let want = format!("ckpt: token {}, checksum {:x}", loops * u64::from(ranks), ckpt_checksum(loops, ranks.into()));
    assert!(w.stdout.contains(&want), "want {want:?} in:\n{}", w.stdout);
    let status = c.p2pjob(0, &["status", &id], Duration::from_secs(20)).stdout;
    Some(Stopped { c, victims, ranks: moved, status, out: w.stdout })
}

/// SIGTERM of a daemon running a rank of the checkpointing ring
/// (`<restart>fail</restart>`, no interval): before it stops, the rank
/// takes a checkpoint with the others and moves alone to a host left, the
/// daemon exits once it has, the other rank never rolls back, and the job
/// ends with the undisturbed result.
#[test]
fn a_daemon_stopped_under_a_running_job_moves_its_rank_alone_and_the_job_completes() {
    let Some(s) = stop_daemons_under_the_ring("sigterm", &[1; 4], (2, 9_311), (1, 1)) else { return };
    let (rank, other) = (s.ranks[0], 1 - s.ranks[0]);
    let moved = format!("move 1: rank {rank} moved off node {}:7400 to node ", s.c.hosts[s.victims[0]].ip);
    assert!(s.status.contains(&moved) && s.status.contains("(its node is shutting down)"), "{}", s.status);
    assert!(!s.status.contains("restart "), "nothing rolled back: {}", s.status);
    assert!(resumed_at(&s.out, rank).is_some_and(|i| i > 0), "rank {rank} resumed: {}", s.out);
    assert_eq!(resumed_at(&s.out, other), None, "rank {other} never resumed: {}", s.out);
}

/// SIGTERM of a daemon running two ranks of the checkpointing ring (host 1
/// offers two slots, three one-slot hosts besides): both ranks move alone,
/// one after the other, each to a host of its own, the third rank goes on
/// untouched, nothing rolls back, and the job ends with the undisturbed
/// result.
#[test]
fn a_daemon_stopped_with_two_ranks_moves_them_alone_in_turn() {
    let Some(s) = stop_daemons_under_the_ring("sigterm_two", &[1, 2, 1, 1], (3, 9_419), (1, 2)) else { return };
    assert_eq!(s.victims, [1], "the two-slot host runs ranks");
    assert_eq!(s.ranks.len(), 2, "two ranks ran on host 1: {:?}", s.ranks);
    let from = format!("moved off node {}:7400 to node ", s.c.hosts[1].ip);
    for rank in &s.ranks {
        let line = s.status.lines().find(|l| l.contains(&format!("rank {rank} {from}")));
        let line = line.unwrap_or_else(|| panic!("rank {rank} moved alone: {}", s.status));
        assert!(line.contains("(its node is shutting down)"), "{line}");
        assert!(resumed_at(&s.out, *rank).is_some_and(|at| at > 0), "rank {rank} resumed: {}", s.out);
    }
    assert!(s.status.contains("move 1: ") && s.status.contains("move 2: "), "{}", s.status);
    assert!(!s.status.contains("restart "), "nothing rolled back: {}", s.status);
    let stayed = (0..3).find(|r| !s.ranks.contains(r)).expect("a rank off host 1");
    assert_eq!(resumed_at(&s.out, stayed), None, "rank {stayed} never resumed: {}", s.out);
}

/// Two daemons running ranks of the checkpointing ring stopped with SIGTERM
/// at the same moment (a rolling restart, a shutdown of several machines):
/// both wait for their ranks to move, one restart moves every rank off both,
/// and the job ends with the undisturbed result. Three ranks on five
/// one-slot hosts: at least two run off the submitter's host.
#[test]
fn two_daemons_stopped_at_once_under_a_running_job_move_every_rank_and_it_completes() {
    let Some(s) = stop_daemons_under_the_ring("sigterm2", &[1; 5], (3, 9_377), (2, 1)) else { return };
    let status = &s.status;
    assert!(status.contains("restart 1: from checkpoint ") && !status.contains("restart 2"), "one restart: {status}");
    assert!(status.contains("(shutting down)"), "{status}");
    assert!(resumed_at(&s.out, 0).is_some_and(|i| i > 0), "every rank rolled back: {}", s.out);
}

/// SIGTERM of the submitting daemon, which runs rank 0 of the
/// checkpointing ring and holds the job: it hands the job to its deputy at
/// once, then rank 0 moves alone as off any stopping node (the deputy moves
/// it), the other rank never rolls back, and the job ends with the
/// undisturbed result, shown by a `wait` on another host that followed the
/// job from before the stop.
#[test]
fn the_submitting_daemon_stopped_under_its_job_hands_it_to_its_deputy_and_its_rank_moves_alone() {
    let Some(prog) = p2pmp_tests::c::ckpt_ring("c-tests-hosts") else { return };
    let Some(mut c) = cluster("sigterm_submitter", 4, &["--heartbeat-ms", "250"]) else { return };
    let loops: u64 = 9_203;
    let job = job_file(&c, "ckpt.xml", &prog, 2, &format!("  <arguments>{loops}</arguments>\n"));
    let id = submit(&c, 0, &job);
    wait_status(&c, 0, &id, "2 running", Duration::from_secs(30));
    // The deputy reads the job's files back once named.
    std::thread::sleep(Duration::from_secs(2));
    let status = c.p2pjob(0, &["status", &id], Duration::from_secs(20)).stdout;
    let hosts = rank_hosts(&c, &status);
    assert_eq!(hosts.first(), Some(&0), "the submitting host runs rank 0: {status}");
    let deputy = hosts[1];
    let asker = (1..4).find(|&i| i != deputy).unwrap();
    let following = c.p2pjob_command(asker, &["wait", &id]);
    let following = std::thread::spawn(move || p2pmp_tests::run_to_end(following, Duration::from_secs(120)));
    std::thread::sleep(Duration::from_secs(1));
    let took = c.terminate(0, Duration::from_secs(45));
    eprintln!("jobd on host 0 exited {took:?} after SIGTERM");
    assert!(took < Duration::from_secs(30), "the stop waited for the rank to move, not for the drain limit");
    let log = c.log(0);
    assert!(log.contains("stopping: the job goes on at its deputy"), "{log}");
    assert!(log.contains("waiting for ranks to move to other nodes before stopping"), "{log}");
    let w = following.join().expect("the waiting thread");
    assert!(w.ok, "{} {}", w.stdout, w.stderr);
    let want = format!("ckpt: token {}, checksum {:x}", loops * 2, ckpt_checksum(loops, 2));
    assert!(w.stdout.contains(&want), "want {want:?} in:\n{}", w.stdout);
    assert!(resumed_at(&w.stdout, 0).is_some_and(|i| i > 0), "rank 0 resumed: {}", w.stdout);
    assert_eq!(resumed_at(&w.stdout, 1), None, "rank 1 never resumed: {}", w.stdout);
    let status = c.p2pjob(asker, &["status", &id], Duration::from_secs(20)).stdout;
    let moved = format!("move 1: rank 0 moved off node {}:7400 to node ", c.hosts[0].ip);
    assert!(status.contains(&moved) && status.contains("(its node is shutting down)"), "{status}");
    assert!(!status.contains("restart "), "nothing rolled back: {status}");
}

#[test]
fn a_paused_host_fails_its_job_within_the_failure_timeout_naming_it() {
    let timeout_ms = "2000";
    let Some(c) = cluster("paused_host", 3, &["--heartbeat-ms", "250", "--failure-timeout-ms", timeout_ms]) else {
        return;
    };
    let tag = "271828";
    let job = job_file(&c, "sleep.xml", "/bin/sleep", 3, &format!("  <arguments>{tag}</arguments>\n"));
    let id = submit(&c, 0, &job);
    wait_status(&c, 0, &id, "3 running", Duration::from_secs(20));
    // Host 2 goes silent: no reset, its daemon and rank stop answering.
    c.pause(2);
    let t0 = Instant::now();
    let w = c.p2pjob(0, &["wait", &id], Duration::from_secs(30));
    let took = t0.elapsed();
    eprintln!("paused host detected after {took:?}: {}", w.stderr.trim());
    assert_eq!(w.code, Some(1), "{} {}", w.stdout, w.stderr);
    assert!(
        w.stderr.contains("node 198.18.0.3:7400 holding rank(s) [") && w.stderr.contains("stopped answering"),
        "{}",
        w.stderr
    );
    assert!(took < Duration::from_secs(8), "detected after {took:?} with a 2 s failure timeout");
    // The other hosts stopped their ranks; the paused one stops its own once it
    // runs again and finds its submitter gone quiet.
    for i in 0..2 {
        p2pmp_tests::wait_until("the job's ranks gone", Duration::from_secs(10), || match ranks_on(&c, i, tag) {
            0 => Ok(()),
            n => Err(format!("{n} left on host {i}")),
        });
    }
    c.resume(2);
    let t1 = Instant::now();
    p2pmp_tests::wait_until("the paused host's rank gone", Duration::from_secs(15), || match ranks_on(&c, 2, tag) {
        0 => Ok(()),
        n => Err(format!("{n} left on host 2")),
    });
    eprintln!("the paused host's rank was gone {:?} after it resumed", t1.elapsed());
}

/// The `slots` column (free/total) of every node `p2pjob nodes` lists on host `i`.
fn slots_column(c: &Cluster, i: usize) -> Vec<String> {
    let out = c.p2pjob(i, &["nodes"], Duration::from_secs(20));
    out.stdout
        .lines()
        .filter(|l| l.starts_with("198.18."))
        .filter_map(|l| l.split_whitespace().nth(6))
        .map(str::to_owned)
        .collect()
}

#[test]
fn free_slots_are_advertised_live_and_finished_jobs_are_forgotten_after_retention() {
    let Some(c) = cluster("live_and_retention", 2, &["--retention-s", "3", "--slots", "2"]) else { return };
    let all_free = || {
        p2pmp_tests::wait_until("every slot free", Duration::from_secs(20), || match slots_column(&c, 1) {
            v if v == ["2/2", "2/2"] => Ok(()),
            v => Err(format!("{v:?}")),
        })
    };
    all_free();
    let job = job_file(&c, "sleep.xml", "/bin/sleep", 3, "  <arguments>300</arguments>\n");
    let id = submit(&c, 0, &job);
    wait_status(&c, 0, &id, "3 running", Duration::from_secs(20));
    // Three ranks on four slots: one slot is free, on one host or the other.
    p2pmp_tests::wait_until("the slots in use advertised", Duration::from_secs(20), || {
        let mut v = slots_column(&c, 1);
        v.sort();
        if v == ["0/2", "1/2"] { Ok(()) } else { Err(format!("{v:?}")) }
    });
    let k = c.p2pjob(1, &["kill", &id], Duration::from_secs(20));
    assert!(k.ok, "{}", k.stderr);
    all_free();
    // Kept for its retention (3 s), then forgotten everywhere, logs and all.
    let s = c.p2pjob(1, &["status", &id], Duration::from_secs(20));
    assert!(s.stdout.contains("killed"), "{} {}", s.stdout, s.stderr);
    p2pmp_tests::wait_until("the job forgotten", Duration::from_secs(20), || {
        let s = c.p2pjob(1, &["status", &id], Duration::from_secs(20));
        if s.code == Some(3) && s.stderr.contains("no job") {
            Ok(())
        } else {
            Err(format!("{} {}", s.stdout, s.stderr))
        }
    });
    assert!(c.leftovers(0).is_empty(), "files left on the holder: {:?}", c.leftovers(0));
}

#[test]
fn a_busy_network_queues_a_hundred_jobs_and_runs_them_all() {
    let Some(c) = cluster("queue_hundred", 4, &["--slots", "4"]) else { return };
    // 100 jobs of 4 ranks on 16 slots, submitted at once through the four hosts.
    let job = job_file(&c, "true.xml", "/bin/true", 4, "");
    let ids: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|h| {
                let (c, job) = (&c, &job);
                s.spawn(move || (0..25).map(|_| submit(c, h, job)).collect::<Vec<_>>())
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(ids.len(), 100);
    p2pmp_tests::wait_until("every job done", Duration::from_secs(120), || {
        let out = c.p2pjob(1, &["--json", "status"], Duration::from_secs(30));
        let v: serde_json::Value =
            serde_json::from_str(out.stdout.trim()).map_err(|e| format!("{e}: {}", out.stdout))?;
        let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
        let failed: Vec<_> = jobs.iter().filter(|j| j["phase"] == "failed").collect();
        assert!(failed.is_empty(), "a busy network failed jobs: {failed:?}");
        let done = jobs.iter().filter(|j| j["phase"] == "done").count();
        if done == 100 { Ok(()) } else { Err(format!("{done} of 100 done")) }
    });
}

#[test]
fn two_jobs_that_each_need_three_of_four_slots_both_complete() {
    let Some(c) = cluster("queue_two", 2, &["--slots", "2"]) else { return };
    let job = job_file(&c, "sleep.xml", "/bin/sleep", 3, "  <arguments>1</arguments>\n");
    let outs: Vec<p2pmp_tests::Finished> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|h| {
                let (c, job) = (&c, &job);
                s.spawn(move || c.p2pjob(h, &["submit", "--wait", job], Duration::from_secs(60)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in &outs {
        assert!(o.ok, "{} {}", o.stdout, o.stderr);
    }
    // One of them waited, and said why.
    assert!(
        outs.iter().any(|o| o.stderr.contains("queued: waiting for 3 slot(s)")),
        "{:?}",
        outs.iter().map(|o| &o.stderr).collect::<Vec<_>>()
    );
}
