//! Fuzz logic, kept here so it is compiled and run by the normal test suite.
//!
//! Each function takes arbitrary bytes, feeds them to one decoder and checks the
//! decoder's invariants; it must never panic. The cargo-fuzz targets under `fuzz/`
//! are one-line shims over these, and a unit test replays every committed corpus
//! file through them on the stable toolchain.

use bytes::Bytes;

use crate::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, Goodbye, Hello, decode_envelope};

mod auth;
mod daemon;
mod message;
mod secure;

/// A checkpoint file through the header and body decoders (the body as stored:
/// the codec's decompression is the MPI library's and bounded there). A file
/// that decodes must encode back to the same bytes, and a body that decodes
/// must survive another round unchanged.
pub fn checkpoint_file(data: &[u8]) {
    use crate::ckpt::{Body, decode_file, encode_file};
    if let Ok((header, stored)) = decode_file(data, 1 << 20) {
        assert!(header.raw_len <= 1 << 20, "a declared size over the limit was accepted");
        assert_eq!(encode_file(&header, stored), data, "a decoded file re-encodes to its bytes");
    }
    let stored = data.get(crate::ckpt::HEADER_LEN..).unwrap_or(data);
    for bytes in [data, stored] {
        if let Ok(body) = Body::decode(&Bytes::copy_from_slice(bytes)) {
            let again = Body::decode(&Bytes::from(body.encode())).expect("an encoded body decodes");
            assert_eq!(again, body, "a body survives a round trip");
        }
    }
}

/// A saved MPI engine (what a moving rank carries to its new node), in an
/// engine file or alone: the file's header, when there is one, survives a
/// round trip; the engine is decoded within a bound, a state that decodes
/// survives a round trip, and one that restores drives a fresh engine
/// without a panic (its frames resent, its messages received).
pub fn saved_engine(data: &[u8]) {
    use crate::mpi::{MpiConfig, MpiEngine, SavedEngine};
    let data = match crate::ckpt::EngineHeader::decode(data) {
        Some((header, rest)) => {
            assert_eq!(
                [header.encode(), rest.to_vec()].concat(),
                data,
                "an engine file's header survives a round trip"
            );
            rest
        }
        None => data,
    };
    let Ok(saved) = SavedEngine::decode(data, 1 << 20) else { return };
    let again = SavedEngine::decode(&saved.encode(), 1 << 20).expect("an encoded state decodes");
    assert_eq!(again, saved, "a saved engine survives a round trip");
    let (rank, size) = (saved.rank(), saved.size());
    let Ok(mut e) = MpiEngine::restore(MpiConfig::default(), rank, size, saved) else { return };
    let now = std::time::Instant::now();
    while e.poll_transmit().is_some() {}
    for src in (0..size.min(8)).filter(|&s| s != rank) {
        let _ = e.irecv(now, 0, Some(src), None);
    }
    while e.poll_transmit().is_some() {}
    while e.poll_completion().is_some() {}
}

pub use auth::{job_signature, key_text, signed_request};
pub use daemon::daemon_node;
pub use message::{MESSAGE_TYPES, message};
pub use secure::secure_channel;

/// The frame decoder over a stream cut into chunks: the first byte picks the chunk
/// size, the second a small maximum frame size (or the default). Checks that the
/// decoder never yields more bytes than it was given nor a frame over the maximum,
/// and that a second decoder reading the stream as the MPI transport does (frames
/// up to the chunk size read in place, larger ones decoded) gives the same frames
/// and errors.
pub fn frame_stream(data: &[u8]) {
    let (chunk, max, stream) = match data {
        [c, m, rest @ ..] => {
            (usize::from(*c).max(1), if *m == 0 { DEFAULT_MAX_FRAME } else { usize::from(*m) * 4 }, rest)
        }
        _ => (1, DEFAULT_MAX_FRAME, data),
    };
    let mut dec = FrameDecoder::new(max);
    // The same stream read as the MPI transport reads it: frames up to
    // `chunk` bytes read in place, larger ones decoded.
    let mut reading = FrameDecoder::new(max);
    let mut yielded = 0usize;
    'outer: for piece in stream.chunks(chunk) {
        dec.push(piece);
        reading.push(piece);
        loop {
            let got = dec.decode();
            let read = match reading.take_small(chunk, |frame| Some(Bytes::copy_from_slice(frame))) {
                Ok(None) => reading.decode(),
                other => other,
            };
            assert_eq!(got, read, "frames read in place as frames decoded");
            match got {
                Ok(Some(frame)) => {
                    assert!(frame.len() <= max, "frame over the maximum");
                    yielded += frame.len() + crate::wire::LEN_PREFIX;
                    assert!(yielded <= stream.len(), "decoder produced bytes it was not given");
                    envelope_frame(frame);
                }
                Ok(None) => break,
                Err(_) => break 'outer,
            }
        }
    }
    let _ = dec.finish();
}

/// One frame body through the envelope decoder, for every body type on the wire.
pub fn envelope(data: &[u8]) {
    envelope_frame(Bytes::copy_from_slice(data));
}

fn envelope_frame(frame: Bytes) {
    let len = frame.len();
    check(decode_envelope::<Hello>(frame.clone()), len);
    check(decode_envelope::<Goodbye>(frame.clone()), len);
    check(decode_envelope::<crate::chord::ChordMsg>(frame.clone()), len);
    check(decode_envelope::<crate::can::CanMsg>(frame.clone()), len);
    check(decode_envelope::<crate::mpi::MpiMsg>(frame.clone()), len);
    after_prefix(&frame);
    check(decode_envelope::<crate::local::LocalRequest>(frame.clone()), len);
    check(decode_envelope::<crate::local::LocalReply>(frame.clone()), len);
    check(decode_envelope::<crate::local::RankHello>(frame.clone()), len);
    check(decode_envelope::<crate::job::JobMsg>(frame.clone()), len);
    check(decode_envelope::<crate::node::NodeMsg>(frame.clone()), len);
    check(decode_envelope::<crate::node::control::ToolRequest>(frame.clone()), len);
    check(decode_envelope::<crate::node::control::ToolReply>(frame), len);
}

/// A rank's link decodes its peer's frames after the sender part it saw
/// before (`MpiMsg::decode_after_prefix`, the serde way's bytes read in
/// place): for any frame and the sender part its own first bytes name,
/// that reads what the serde way reads, and takes a frame exactly when
/// decoding it whole does, with the same request id, body and payload, and
/// fails exactly when decoding it whole fails.
fn after_prefix(frame: &Bytes) {
    use crate::id::Id;
    use crate::machine::NodeAddr;
    use crate::mpi::MpiMsg;
    use crate::wire::{HeaderPrefix, decode_after_prefix};
    let Ok(((_, sender, addr), _)) = postcard::take_from_bytes::<(u16, Id, NodeAddr)>(frame) else { return };
    let prefix = HeaderPrefix::new(&sender, &addr).expect("an id and an address encode");
    let whole = decode_envelope::<MpiMsg>(frame.clone());
    let in_place = MpiMsg::decode_after_prefix(frame, &prefix);
    assert_eq!(in_place, decode_after_prefix::<MpiMsg>(frame, &prefix), "read in place as serde reads it");
    match in_place {
        Ok(Some(got)) => {
            let env = whole.expect("taken after its prefix, so decoded whole too");
            assert_eq!(got, (env.request_id, env.body, env.payload), "decoded whole and after its prefix alike");
        }
        Err(_) => assert!(whole.is_err(), "refused after its prefix, so refused whole too"),
        // Another version, or a sender part encoded otherwise than it
        // encodes now: decoded whole.
        Ok(None) => {}
    }
}

fn check<B>(res: Result<Envelope<B>, crate::wire::WireError>, len: usize) {
    if let Ok(env) = res {
        assert!(env.payload.len() <= len, "payload longer than its frame");
    }
}

/// The chunks [`can_node`] cuts its input into: a length byte (also the
/// time that passes before the chunk, in 7 ms steps), then that many bytes.
fn can_chunks(data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut rest = data;
    std::iter::from_fn(move || {
        let (&len, tail) = rest.split_first()?;
        let (frame, more) = tail.split_at(usize::from(len).min(tail.len()));
        rest = more;
        Some((len, frame))
    })
}

/// CAN messages from arbitrary bytes, fed to a live node: the bytes are cut into
/// frames (the first byte of each chunk picks its length); each frame that decodes
/// as a `CanMsg` envelope is handed to a node that owns part of a small network,
/// time moving on a little between inputs. Nothing may panic, and every action the
/// node emits must survive the codec.
pub fn can_node(data: &[u8]) {
    use std::time::{Duration, Instant};

    use crate::can::{CanConfig, CanMsg, CanNode};
    use crate::machine::{Action, Machine, NodeAddr};
    let t0 = Instant::now();
    let me = NodeAddr::loopback(1, 9000);
    let mut node = CanNode::new(CanConfig::default(), me, vec![], t0, 7);
    let mut now = t0;
    let drain = |node: &mut CanNode| {
        for _ in 0..10_000 {
            match node.poll_action() {
                Some(Action::Send { msg, .. }) => {
                    crate::wire::round_trip(&msg, DEFAULT_MAX_FRAME)
                        .expect("a CAN node emitted what the codec cannot carry");
                }
                Some(Action::Event(_)) => {}
                None => return,
            }
        }
        panic!("a CAN node kept emitting actions");
    };
    drain(&mut node);
    for (len, frame) in can_chunks(data) {
        now += Duration::from_millis(u64::from(len) * 7);
        if let Ok(env) = decode_envelope::<CanMsg>(Bytes::copy_from_slice(frame)) {
            node.handle_message(now, env);
            drain(&mut node);
            node.check_invariants();
        }
        if node.poll_timeout().is_some_and(|t| t <= now) {
            node.handle_timeout(now);
            drain(&mut node);
            node.check_invariants();
        }
    }
}

/// A `res:any` line of a peer (any text) through the resource-line parser:
/// it never panics, and what it accepts it writes back to the same resources.
pub fn resource_line(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok((addr, res)) = crate::job::Resources::parse_any_value(text) {
        let again = crate::job::Resources::parse_any_value(&res.any_value(addr));
        assert_eq!(again, Ok((addr, res)), "a parsed line does not round-trip");
    }
}

/// The `<p2pjob>` parser over arbitrary bytes: it never panics, and whatever it
/// accepts it writes back ([`crate::job::JobDescription::to_xml`]) as a file that
/// parses to the same description without warnings.
pub fn job_file(data: &[u8]) {
    use crate::job::JobDescription;
    if let Ok(parsed) = JobDescription::parse(data) {
        let xml = parsed.job.to_xml();
        match JobDescription::parse(xml.as_bytes()) {
            Ok(again) => {
                assert_eq!(again.job, parsed.job, "round trip changed the job:\n{xml}");
                assert!(again.warnings.is_empty(), "written file warns: {:?}", again.warnings);
            }
            Err(e) => panic!("written file does not parse: {e}\n{xml}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Replays every committed corpus file of every fuzz target through the same
    /// functions the fuzzers call, so the targets cannot rot on stable.
    #[test]
    fn committed_corpora_replay_without_panic() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        let targets = [
            ("frame_decoder", super::frame_stream as fn(&[u8])),
            ("envelope_decoder", super::envelope as fn(&[u8])),
            ("job_file", super::job_file as fn(&[u8])),
            ("can_node", super::can_node as fn(&[u8])),
            ("resource_line", super::resource_line as fn(&[u8])),
            ("daemon_node", super::daemon_node as fn(&[u8])),
            ("checkpoint_file", super::checkpoint_file as fn(&[u8])),
            ("saved_engine", super::saved_engine as fn(&[u8])),
            ("message", |d: &[u8]| {
                super::message(d);
            }),
            ("key_text", super::key_text as fn(&[u8])),
            ("signed_request", super::signed_request as fn(&[u8])),
            ("job_signature", super::job_signature as fn(&[u8])),
            ("secure_channel", super::secure_channel as fn(&[u8])),
        ];
        for (name, run) in targets {
            let dir = root.join(name);
            let mut n = 0;
            for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display())) {
                let path = entry.unwrap().path();
                if path.is_file() {
                    run(&std::fs::read(&path).unwrap());
                    n += 1;
                }
            }
            assert!(n > 0, "corpus {name} is empty");
        }
    }

    /// Every can_node seed holds a frame a node takes: of this protocol
    /// version, not stopped at its check.
    #[test]
    fn every_can_node_seed_reaches_the_node() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/can_node");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let taken = super::can_chunks(&data)
                .filter(|(_, f)| {
                    crate::wire::decode_envelope::<crate::can::CanMsg>(bytes::Bytes::copy_from_slice(f)).is_ok()
                })
                .count();
            assert!(taken > 0, "{}", path.display());
        }
    }
}
