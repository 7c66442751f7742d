//! The daemon node's side of the `p2pjob` tool protocol, and what it does with the
//! submitter's events (file reads, output files, progress for watchers).

use std::time::Instant;

use bytes::Bytes;

use super::control::{JobPhase, JobStatus, RankStatus, ToolReply, ToolRequest};
use super::{ConnId, DaemonNode, JobMeta, NodeEvent, Pending, join, plain_name};
use crate::job::{ANY_NAME, JobDescription, JobId, Outcome, Phase, SubmitEvent, SubmitterCommand};
use crate::machine::Machine;
use crate::overlay::OverlayCommand;

impl DaemonNode {
    pub(super) fn tool_reply(&mut self, conn: ConnId, request_id: u64, reply: ToolReply) {
        self.event(NodeEvent::ToolReply { conn, request_id, reply, payload: Bytes::new() });
    }

    /// Sends `reply` (with `payload`) to everyone watching `job`.
    fn tell_watchers(&mut self, job: JobId, reply: ToolReply, payload: Bytes) {
        let Some(meta) = self.jobs.get(&job) else { return };
        for &(conn, request_id) in &meta.watchers {
            let reply = reply.clone();
            self.actions.push_back(crate::machine::Action::Event(NodeEvent::ToolReply {
                conn,
                request_id,
                reply,
                payload: payload.clone(),
            }));
        }
    }

    /// Where output file `name` of `rank` goes: `<base>/<name>` for a one-rank job,
    /// `<base>/<name>.<rank>` otherwise.
    fn output_path(&self, job: JobId, rank: u32, name: &str) -> Option<String> {
        let meta = self.jobs.get(&job)?;
        if !plain_name(name) {
            return None;
        }
        let file = if meta.size == 1 { name.to_owned() } else { format!("{name}.{rank}") };
        Some(join(&meta.base_dir, &file))
    }

    pub(super) fn on_tool(&mut self, now: Instant, conn: ConnId, request_id: u64, req: ToolRequest) {
        match req {
            ToolRequest::Submit { nonce, xml, base_dir, watch } => {
                let parsed = match JobDescription::parse(xml.as_bytes()) {
                    Ok(p) => p,
                    Err(e) => {
                        let message = format!("bad job file: {e}");
                        return self.tool_reply(conn, request_id, ToolReply::Error { message });
                    }
                };
                let size = parsed.job.processes;
                match self.submitter.submit(now, nonce, parsed.job) {
                    Ok((job, new)) => {
                        let meta = self.jobs.entry(job).or_insert_with(|| JobMeta {
                            base_dir,
                            size,
                            watchers: Vec::new(),
                            end: None,
                        });
                        if watch {
                            meta.watchers.push((conn, request_id));
                        }
                        self.tool_reply(conn, request_id, ToolReply::Submitted { job, new });
                        if watch {
                            self.replay_end(conn, request_id, job);
                        }
                    }
                    Err(e) => self.tool_reply(conn, request_id, ToolReply::Error { message: e.to_string() }),
                }
            }
            ToolRequest::Watch { job } => match self.jobs.get_mut(&job) {
                Some(meta) => {
                    meta.watchers.push((conn, request_id));
                    self.replay_end(conn, request_id, job);
                }
                None => self.tool_reply(conn, request_id, ToolReply::Error { message: format!("no job {job} here") }),
            },
            ToolRequest::Status { job } => {
                let ids: Vec<JobId> = match job {
                    Some(j) if !self.jobs.contains_key(&j) => {
                        let message = format!("no job {j} here");
                        return self.tool_reply(conn, request_id, ToolReply::Error { message });
                    }
                    Some(j) => vec![j],
                    None => self.jobs.keys().copied().collect(),
                };
                let jobs = ids.into_iter().filter_map(|j| self.status_of(j)).collect();
                self.tool_reply(conn, request_id, ToolReply::Jobs { jobs });
            }
            ToolRequest::Kill { job } => match self.submitter.handle_command(now, SubmitterCommand::Kill(job)) {
                Ok(()) => self.tool_reply(conn, request_id, ToolReply::Killing { job }),
                Err(e) => self.tool_reply(conn, request_id, ToolReply::Error { message: e.to_string() }),
            },
            ToolRequest::Nodes => {
                let token = self.token();
                if self.overlay(now, OverlayCommand::Query { token, name: ANY_NAME.to_owned() }) {
                    self.pending.insert(token, Pending::Nodes { conn, request_id });
                } else {
                    let message = "not connected to an overlay".to_owned();
                    self.tool_reply(conn, request_id, ToolReply::Error { message });
                }
            }
        }
    }

    /// A watcher of a job that is already over gets its end at once.
    fn replay_end(&mut self, conn: ConnId, request_id: u64, job: JobId) {
        let Some(meta) = self.jobs.get_mut(&job) else { return };
        if let Some((phase, codes, error)) = meta.end.clone() {
            meta.watchers.retain(|w| *w != (conn, request_id));
            self.tool_reply(conn, request_id, ToolReply::Finished { job, phase, codes, error });
        }
    }

    fn status_of(&self, job: JobId) -> Option<JobStatus> {
        let meta = self.jobs.get(&job)?;
        let s = self.submitter.get(job)?;
        let phase = match (&meta.end, s.phase()) {
            (Some((p, _, _)), _) => *p,
            (None, Phase::Resolving) => JobPhase::Resolving,
            (None, Phase::Placing) => JobPhase::Placing,
            (None, _) => JobPhase::Running,
        };
        let ranks = s
            .ranks()
            .iter()
            .map(|r| RankStatus { rank: r.rank, node: r.node, started: r.started, exit: r.exit })
            .collect();
        let error = meta.end.as_ref().and_then(|e| e.2.clone());
        Some(JobStatus { job, executable: s.description().executable.clone(), phase, ranks, error })
    }

    pub(super) fn on_submit_event(&mut self, now: Instant, e: SubmitEvent) {
        match e {
            SubmitEvent::Overlay(cmd) => {
                self.overlay(now, cmd);
            }
            SubmitEvent::ReadFile { job, file, path } => {
                let base = self.jobs.get(&job).map(|m| m.base_dir.clone()).unwrap_or_default();
                self.event(NodeEvent::ReadFile { job, file, path: join(&base, &path) });
            }
            SubmitEvent::Placed { job, ranks } => {
                self.tell_watchers(job, ToolReply::Placed { job, ranks }, Bytes::new())
            }
            SubmitEvent::Started { job, rank, node } => {
                self.tell_watchers(job, ToolReply::Started { job, rank, node }, Bytes::new())
            }
            SubmitEvent::Output { job, rank, stream, offset, data } => {
                self.tell_watchers(job, ToolReply::Output { job, rank, stream, offset }, data)
            }
            SubmitEvent::WriteFile { job, rank, name, offset, data } => {
                if let Some(path) = self.output_path(job, rank, &name) {
                    self.event(NodeEvent::WriteFile { path, offset, data });
                }
            }
            SubmitEvent::OutputFileDone { job, rank, name, ok } => {
                if let Some(path) = self.output_path(job, rank, &name) {
                    self.tell_watchers(job, ToolReply::OutputFile { job, rank, path, ok }, Bytes::new());
                }
            }
            SubmitEvent::Exited { job, rank, code } => {
                self.tell_watchers(job, ToolReply::Exited { job, rank, code }, Bytes::new())
            }
            SubmitEvent::Finished { job, outcome } => {
                let (phase, codes, error) = match outcome {
                    Outcome::Done { codes } if codes.iter().all(|c| *c == 0) => (JobPhase::Done, codes, None),
                    Outcome::Done { codes } => {
                        let bad: Vec<String> = codes
                            .iter()
                            .enumerate()
                            .filter(|(_, c)| **c != 0)
                            .map(|(r, c)| format!("rank {r} exited with {c}"))
                            .collect();
                        (JobPhase::Failed, codes, Some(bad.join(", ")))
                    }
                    Outcome::Failed(e) => (JobPhase::Failed, Vec::new(), Some(e.to_string())),
                    Outcome::Killed => (JobPhase::Killed, Vec::new(), Some("killed".to_owned())),
                };
                let fin = ToolReply::Finished { job, phase, codes: codes.clone(), error: error.clone() };
                self.tell_watchers(job, fin, Bytes::new());
                if let Some(meta) = self.jobs.get_mut(&job) {
                    meta.watchers.clear();
                    meta.end = Some((phase, codes, error));
                }
                self.event(NodeEvent::JobFinished { job, phase });
            }
            SubmitEvent::Status { .. } => {}
        }
    }
}
