//! Fuzz logic of the adapters, compiled and replayed by the normal test suite
//! like `p2pmp_core::fuzzing`: the cargo-fuzz targets under `fuzz/` are
//! one-line shims over these.

use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::NodeCommand;

use crate::local::{DaemonCodec, LocalCodec};

/// A local control connection's bytes (a tool's preface and requests, or a
/// rank's frames) through the daemon's codec, cut into chunks of the size the
/// first byte picks. It never panics; once it refuses the stream it is closed,
/// and every command it yields names this connection.
pub fn local_stream(data: &[u8]) {
    commands(data);
}

/// [`local_stream`]: how many commands the stream yielded.
fn commands(data: &[u8]) -> usize {
    let (chunk, stream) = match data.split_first() {
        Some((c, rest)) => (usize::from(*c).max(1), rest),
        None => return 0,
    };
    let mut n = 0;
    let mut codec = DaemonCodec::new(NodeAddr::loopback(1, 7420));
    for piece in stream.chunks(chunk) {
        match codec.bytes(9, piece) {
            Ok(cmds) => {
                n += cmds.len();
                for cmd in cmds {
                    assert!(
                        matches!(cmd, NodeCommand::Tool { conn: 9, .. } | NodeCommand::Local { conn: 9, .. }),
                        "a command for another connection: {cmd:?}"
                    );
                }
            }
            Err(_) => break,
        }
    }
    assert_eq!(codec.closed(9), Some(NodeCommand::ConnClosed { conn: 9 }));
    n
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Replays the committed corpus of the `local_stream` target.
    #[test]
    fn committed_corpus_replays_without_panic() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/local_stream");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            super::local_stream(&std::fs::read(&path).unwrap());
            n += 1;
        }
        assert!(n > 0, "corpus local_stream is empty");
    }

    /// The seeds of whole requests yield commands: they are of this
    /// protocol version, not stopped at its check.
    #[test]
    fn the_request_seeds_reach_the_daemon() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/local_stream");
        for (name, want) in [("rank_resolve", 1), ("tool_two_requests", 2)] {
            assert_eq!(super::commands(&std::fs::read(dir.join(name)).unwrap()), want, "{name}");
        }
    }
}
