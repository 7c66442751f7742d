//! Collecting: once the job runs, the ranks' start, output (acknowledged so
//! the executors read on), output files (checked against their digests) and
//! exits, and the job's end.

use super::*;

impl Submission {
    /// A message while the job runs.
    pub(super) fn while_running(&mut self, now: Instant, from: NodeAddr, body: JobMsg, payload: Bytes) -> Option<()> {
        let (job, wire) = (self.job, self.wire);
        match body {
            JobMsg::Started { rank, .. } if self.holds(from, rank) => {
                self.ranks[rank as usize].started = true;
                self.event(SubmitEvent::Started { job, rank, node: from });
                self.moved_rank_started(now, rank, from);
            }
            JobMsg::Moved { rank, request, .. } => return self.on_moved(now, from, (rank, request), payload),
            m @ (JobMsg::Accept { .. }
            | JobMsg::Reject { .. }
            | JobMsg::Resend { .. }
            | JobMsg::Have { .. }
            | JobMsg::StageAck { .. }
            | JobMsg::Staged { .. }) => return self.while_moving(now, from, m),
            JobMsg::Output { rank, stream, offset, .. } => {
                self.ack_stream(from, rank, payload.len());
                if !self.holds(from, rank) {
                    return None;
                }
                // After a restart, a rank's output goes on after what its
                // earlier runs wrote.
                let offset = offset + self.out_base.get(&(rank, stream)).copied().unwrap_or(0);
                let end = self.out_end.entry((rank, stream)).or_default();
                *end = (*end).max(offset + payload.len() as u64);
                // The deputies keep a copy, so the output outlives this node.
                self.copy_to_deputies(&JobMsg::Output { job: wire, rank, stream, offset }, &payload);
                self.event(SubmitEvent::Output { job, rank, stream, offset, data: payload });
            }
            JobMsg::CheckpointFile { rank, epoch, offset, total, digest, .. } => {
                self.ack_output(from, payload.len())?;
                let file = cuts::ShippedCheckpoint { rank, epoch, offset, total, digest };
                return self.on_checkpoint_file(from, file, payload);
            }
            JobMsg::OutputFile { rank, name, offset, total, digest: want, .. } => {
                self.ack_output(from, payload.len())?;
                if self.carries(from, rank) {
                    return self.on_carried_chunk(name, (offset, total, want), payload);
                }
                if !self.holds(from, rank) || !self.desc.outputfiles.contains(&name) {
                    return None;
                }
                let key = (rank, name.clone());
                let f = self.out_files.entry(key.clone()).or_insert(OutFile { hasher: Sha1::new(), received: 0 });
                if offset != f.received {
                    return None;
                }
                f.hasher.update(&payload);
                f.received += payload.len() as u64;
                let complete = f.received >= total;
                // The deputies keep a copy, so the results outlive this node.
                let copy = JobMsg::OutputFile { job: wire, rank, name: name.clone(), offset, total, digest: want };
                self.copy_to_deputies(&copy, &payload);
                self.event(SubmitEvent::WriteFile { job, rank, name: name.clone(), offset, total, data: payload });
                if complete {
                    let f = self.out_files.remove(&key)?;
                    let ok = f.received == total && Id::from_bytes(f.hasher.finalize().into()) == want;
                    if ok {
                        self.out_ok.insert((rank, name.clone()));
                    } else {
                        self.out_bad.push((rank, name.clone(), "arrived corrupt"));
                    }
                    self.event(SubmitEvent::OutputFileDone { job, rank, name, ok });
                }
            }
            JobMsg::Exit { rank, code, .. } if self.holds(from, rank) => {
                if self.ranks[rank as usize].exit.is_some() {
                    return None;
                }
                self.ranks[rank as usize].exit = Some(code);
                // Its files came before its exit: one begun and not finished now never is.
                for name in &self.desc.outputfiles {
                    if self.out_files.remove(&(rank, name.clone())).is_some() {
                        self.out_bad.push((rank, name.clone(), "cut short"));
                    }
                }
                self.event(SubmitEvent::Exited { job, rank, code });
                // The ranks still running may all have taken a cut asked for.
                self.settle_checkpoints();
                if code != 0 && self.ranks.iter().any(|r| r.exit.is_none()) {
                    // An MPI_Abort or a crash: the others would wait for it forever.
                    self.fail(SubmitError::RankFailed { rank, code });
                    return Some(());
                }
                if self.ranks.iter().all(|r| r.exit.is_some()) {
                    // An output file must come back from some rank (often only
                    // rank 0 writes it); one that came back damaged always fails.
                    for name in &self.desc.outputfiles {
                        if !self.out_ok.iter().any(|(_, n)| n == name)
                            && !self.out_bad.iter().any(|(_, n, _)| n == name)
                        {
                            let ranks = self.ranks.len() as u32;
                            let rank = if ranks == 1 { 0 } else { u32::MAX };
                            self.out_bad.push((rank, name.clone(), "missing"));
                        }
                    }
                    if !self.out_bad.is_empty() {
                        let files = self.out_bad.iter().map(|(r, n, why)| (*r, n.clone(), (*why).to_owned())).collect();
                        self.fail(SubmitError::OutputFiles { files });
                        return Some(());
                    }
                    let codes = self.ranks.iter().map(|r| r.exit.unwrap_or_default()).collect();
                    self.finish(Outcome::Done { codes });
                }
            }
            JobMsg::Leaving { .. } => return self.on_leaving(now, from),
            JobMsg::Adopted { streamed, .. } => return self.on_adopted(from, streamed),
            m @ (JobMsg::CheckpointAsked { .. } | JobMsg::Checkpointed { .. } | JobMsg::Recovered { .. }) => {
                return self.on_checkpoint_msg(from, m);
            }
            _ => return None,
        }
        Some(())
    }

    /// Counts `len` bytes of output files (or checkpoint files) from `from`:
    /// every chunk moves the node's window, whether it is used or not.
    fn ack_output(&mut self, from: NodeAddr, len: usize) -> Option<()> {
        let n = self.nodes.get_mut(&from).filter(|n| !n.accepted.is_empty())?;
        n.out_consumed += len as u64;
        let consumed = n.out_consumed;
        self.send(from, JobMsg::OutputAck { job: self.wire, consumed }, Bytes::new());
        Some(())
    }

    /// Counts `len` bytes of `rank`'s output from `from`, acknowledged every
    /// [`STREAM_ACK_EVERY`] bytes so the executor reads the rank's pipes on.
    fn ack_stream(&mut self, from: NodeAddr, rank: u32, len: usize) {
        // Only ranks placed there: a peer's made-up ranks must not grow the map.
        let Some(n) = self.nodes.get_mut(&from).filter(|n| n.accepted.contains(&rank)) else { return };
        let (got, acked) = n.streamed.entry(rank).or_default();
        *got += len as u64;
        if *got - *acked >= STREAM_ACK_EVERY {
            *acked = *got;
            let msg = JobMsg::StreamAck { job: self.wire, rank, consumed: *got };
            self.send(from, msg, Bytes::new());
        }
    }

    pub(super) fn holds(&self, from: NodeAddr, rank: u32) -> bool {
        self.ranks.get(rank as usize).is_some_and(|r| r.node == Some(from))
    }
}
