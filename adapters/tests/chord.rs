//! One conformance test, three runtimes: three Chord nodes in one process join,
//! register and query over loopback TCP, once per shell.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use p2pmp_adapters::{DriverConfig, NodeHandle, RuntimeKind, spawn_node};
use p2pmp_core::chord::{ChordConfig, ChordNode};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::overlay::{OverlayCommand, OverlayEvent};

const WAIT: Duration = Duration::from_secs(20);

fn chord(rt: RuntimeKind, bootstrap: Vec<NodeAddr>) -> NodeHandle<ChordNode> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = NodeAddr(l.local_addr().unwrap());
    let cfg = ChordConfig {
        stabilize_period: Duration::from_millis(50),
        fix_fingers_period: Duration::from_millis(50),
        check_predecessor_period: Duration::from_millis(100),
        request_timeout: Duration::from_millis(300),
        join_backoff_min: Duration::from_millis(50),
        ..ChordConfig::default()
    };
    let dcfg = DriverConfig { network_id: 3, ..DriverConfig::default() };
    spawn_node(rt, l, dcfg, move |now| ChordNode::new(cfg, addr, bootstrap, now, 7)).unwrap()
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn three_nodes_join_register_and_query_on_every_runtime() {
    for rt in RuntimeKind::available() {
        let a = chord(rt, Vec::new());
        let boot = vec![NodeAddr(a.local_addr())];
        let b = chord(rt, boot.clone());
        let c = chord(rt, boot);
        let nodes = [&a, &b, &c];
        wait_for(&format!("{rt}: a ring of three"), || {
            let succs: Vec<NodeAddr> =
                nodes.iter().map(|n| n.inspect(|d| d.machine().successor().addr).unwrap()).collect();
            let mut seen = succs.clone();
            seen.sort();
            seen.dedup();
            (seen.len() == 3).then_some(())
        });
        let ttl = Duration::from_secs(30);
        a.command(OverlayCommand::Register { name: "svc".into(), value: format!("on-{rt}"), ttl }).unwrap().unwrap();
        for (i, n) in nodes.iter().enumerate() {
            wait_for(&format!("{rt}: query from node {i}"), || {
                let token = i as u64 + 1;
                n.command(OverlayCommand::Query { token, name: "svc".into() }).unwrap().unwrap();
                loop {
                    match n.events().recv_blocking().unwrap() {
                        OverlayEvent::QueryDone { token: t, result, .. } if t == token => {
                            return result.ok().filter(|v| v == &[format!("on-{rt}")]).map(|_| ());
                        }
                        _ => continue,
                    }
                }
            });
        }
    }
}
