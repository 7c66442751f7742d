//! Windowed file transfer to one node: files go out in chunks with at most
//! `window` bytes unacknowledged, so a large file neither overflows the sender's
//! queue nor floods the receiver. The receiver acknowledges with the cumulative
//! count of bytes it has consumed. Staging uses it (submitter to executor,
//! [`super::JobMsg::StageAck`]) and so do output files (executor to submitter,
//! [`super::JobMsg::OutputAck`]).

use std::collections::VecDeque;

/// The next thing to send to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Bytes `start..end` of file `file`.
    Chunk { file: u32, start: usize, end: usize },
    /// Every queued file has gone out: the end-of-staging marker.
    End,
}

/// What is still to be sent to one node and how much of it is in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Outbox {
    /// Files still to send, each with the offset of its next chunk.
    queue: VecDeque<(u32, usize)>,
    /// The end marker follows once the queue drains.
    end_due: bool,
    sent: u64,
    acked: u64,
}

impl Outbox {
    /// Queues `file` from its start, followed by an end marker.
    pub(crate) fn push_file(&mut self, file: u32) {
        self.push(file);
        self.end_due = true;
    }

    /// Queues `file` from its start, with no end marker (a stream of files
    /// that has no batch end, such as output files).
    pub(crate) fn push(&mut self, file: u32) {
        self.queue.push_back((file, 0));
    }

    /// The node has consumed `consumed` bytes in all (never more than were sent).
    /// Returns whether this moved the window.
    pub(crate) fn ack(&mut self, consumed: u64) -> bool {
        let consumed = consumed.min(self.sent);
        let moved = consumed > self.acked;
        self.acked = self.acked.max(consumed);
        moved
    }

    /// Bytes the node has acknowledged in all.
    pub(crate) fn acked(&self) -> u64 {
        self.acked
    }

    /// Bytes sent and not yet acknowledged.
    pub(crate) fn in_flight(&self) -> u64 {
        self.sent - self.acked
    }

    /// The next piece that fits in `window`, given each file's length; `None`
    /// while the window is full or nothing is due.
    pub(crate) fn next(&mut self, window: u64, chunk: usize, len: impl Fn(u32) -> usize) -> Option<Piece> {
        let Some(&(file, start)) = self.queue.front() else {
            return std::mem::take(&mut self.end_due).then_some(Piece::End);
        };
        let total = len(file);
        // An empty file still goes out once, so the node learns its (empty) digest.
        let end = (start + chunk.max(1)).min(total);
        let bytes = (end - start) as u64;
        if bytes > 0 && self.in_flight() + bytes > window.max(chunk as u64) {
            return None;
        }
        self.sent += bytes;
        if end >= total {
            self.queue.pop_front();
        } else if let Some(front) = self.queue.front_mut() {
            front.1 = end;
        }
        Some(Piece::Chunk { file, start, end })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn drain(o: &mut Outbox, window: u64, chunk: usize, lens: &[usize]) -> Vec<Piece> {
        std::iter::from_fn(|| o.next(window, chunk, |f| lens[f as usize])).collect()
    }

    #[test]
    fn files_go_out_in_chunks_then_the_end_marker() {
        let mut o = Outbox::default();
        o.push_file(0);
        o.push_file(1);
        let got = drain(&mut o, 1 << 20, 4, &[6, 0]);
        let want = vec![
            Piece::Chunk { file: 0, start: 0, end: 4 },
            Piece::Chunk { file: 0, start: 4, end: 6 },
            Piece::Chunk { file: 1, start: 0, end: 0 },
            Piece::End,
        ];
        assert_eq!(got, want);
        assert_eq!(o.next(1 << 20, 4, |_| 0), None, "one end marker per batch");
    }

    #[test]
    fn a_full_window_waits_for_acks() {
        let mut o = Outbox::default();
        o.push_file(0);
        assert_eq!(drain(&mut o, 8, 4, &[20]).len(), 2);
        assert_eq!(o.in_flight(), 8);
        assert!(!o.ack(0));
        assert!(o.ack(4));
        assert_eq!(drain(&mut o, 8, 4, &[20]), vec![Piece::Chunk { file: 0, start: 8, end: 12 }]);
        assert!(o.ack(100), "an ack beyond what was sent counts as everything sent");
        assert_eq!(o.in_flight(), 0);
    }

    proptest! {
        /// Whatever the acks, nothing is ever beyond the window, every byte of
        /// every queued file goes out exactly once and in order, then one end.
        #[test]
        fn window_is_respected_and_everything_goes_out_once(
            lens in proptest::collection::vec(0usize..50, 1..5),
            chunk in 1usize..16,
            window in 1u64..64,
            acks in proptest::collection::vec(0u64..40, 0..200),
        ) {
            let mut o = Outbox::default();
            for f in 0..lens.len() as u32 {
                o.push_file(f);
            }
            let mut seen: Vec<usize> = vec![0; lens.len()];
            let mut ends = 0;
            let mut acks = acks.into_iter();
            let mut consumed = 0u64;
            for _ in 0..10_000 {
                match o.next(window, chunk, |f| lens[f as usize]) {
                    Some(Piece::Chunk { file, start, end }) => {
                        prop_assert_eq!(seen[file as usize], start);
                        prop_assert!(end <= lens[file as usize] && end - start <= chunk);
                        seen[file as usize] = end;
                        prop_assert!(o.in_flight() <= window.max(chunk as u64));
                    }
                    Some(Piece::End) => ends += 1,
                    None if ends == 1 => break,
                    None => {
                        consumed = consumed.saturating_add(acks.next().unwrap_or(u64::MAX));
                        o.ack(consumed);
                    }
                }
            }
            prop_assert_eq!(ends, 1);
            prop_assert_eq!(seen, lens);
        }
    }
}
