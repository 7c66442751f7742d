//! Real node processes on loopback: for each runtime, 16 nodes form one ring and
//! lookups from every node agree with the owner computed from the ids; and a
//! network mixing the three runtimes does the same and shares registrations.

use std::time::Duration;

use p2pmp_tests::{check_lookups, start_network, wait_for_ring, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_p2pmp-node");
const SETTLE: Duration = Duration::from_secs(40);

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("key-{i}")).collect()
}

fn one_ring(runtime: &str) {
    let mut nodes = start_network(BIN.as_ref(), &[runtime], 16);
    wait_for_ring(&mut nodes, SETTLE);
    check_lookups(&mut nodes, &keys(6), Duration::from_secs(10));
}

#[test]
fn sixteen_tokio_nodes_form_one_ring() {
    one_ring("tokio");
}

#[test]
fn sixteen_smol_nodes_form_one_ring() {
    one_ring("smol");
}

#[test]
fn sixteen_mio_nodes_form_one_ring() {
    one_ring("mio");
}

#[test]
fn a_mixed_network_interoperates() {
    let mut nodes = start_network(BIN.as_ref(), &["tokio", "smol", "mio"], 9);
    wait_for_ring(&mut nodes, SETTLE);
    check_lookups(&mut nodes, &keys(4), Duration::from_secs(10));
    // Registrations made on each runtime are seen from every other.
    for (i, rt) in ["tokio", "smol", "mio"].iter().enumerate() {
        let line = nodes[i].cmd(&format!("register mixed-{rt} from-{rt} 60"));
        assert!(line.starts_with("register ok"), "{line}");
    }
    for n in nodes.iter_mut() {
        for rt in ["tokio", "smol", "mio"] {
            let name = format!("mixed-{rt}");
            wait_until(&format!("{name} from {}", n.addr), Duration::from_secs(10), || match n.query(&name) {
                Ok(v) if v == [format!("from-{rt}")] => Ok(()),
                other => Err(format!("{other:?}")),
            });
        }
    }
}

#[test]
fn a_can_of_nine_dimensions_is_refused_with_a_clear_error() {
    let args = ["--overlay", "can", "--dims", "9", "--listen", "127.0.0.1:0"];
    let out = std::process::Command::new(BIN).args(args).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--dims") && err.contains("1..=8"), "{err}");
}
