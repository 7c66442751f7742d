//! The local node protocol as ranks use it: register a process key (kept while
//! the connection lives; a rank running here is known by it from then on),
//! resolve one through the overlay, withdraw one, report checkpoints
//! ([`super::checkpoint`]).

use std::time::Instant;

use super::{Client, ConnId, DaemonNode, Pending};
use crate::id::Id;
use crate::local::{LocalError, LocalReply, LocalRequest};
use crate::overlay::{OverlayCommand, OverlayError};

impl DaemonNode {
    pub(super) fn on_local(&mut self, now: Instant, conn: ConnId, request_id: u64, req: LocalRequest) {
        match req {
            LocalRequest::Register { key, addr } => {
                let (name, value) = (key.to_string(), addr.to_string());
                let ttl = self.process_ttl;
                self.exec.handle_rank_registered(conn, key);
                let ok = self.overlay(now, OverlayCommand::Register { name: name.clone(), value: value.clone(), ttl });
                if ok {
                    self.regs.entry(conn).or_default().push((name, value));
                    self.reply(conn, request_id, LocalReply::Registered { key });
                } else {
                    self.reply(conn, request_id, LocalReply::Failed { error: LocalError::Refused });
                }
            }
            LocalRequest::Resolve { key } => {
                if !self.overlay.is_joined() {
                    return self.reply(conn, request_id, LocalReply::Failed { error: LocalError::NotConnected });
                }
                let token = self.token();
                if self.overlay(now, OverlayCommand::Query { token, name: key.to_string() }) {
                    self.pending.insert(token, Pending::Resolve { conn, request_id, key });
                } else {
                    self.reply(conn, request_id, LocalReply::Failed { error: LocalError::Refused });
                }
            }
            LocalRequest::Unregister { key, addr } => {
                let (name, value) = (key.to_string(), addr.to_string());
                if let Some(v) = self.regs.get_mut(&conn) {
                    v.retain(|r| *r != (name.clone(), value.clone()));
                }
                self.overlay(now, OverlayCommand::Unregister { name, value });
                self.reply(conn, request_id, LocalReply::Unregistered { key });
            }
            report @ (LocalRequest::Checkpointed { .. } | LocalRequest::Recovered { .. }) => {
                self.on_rank_report(conn, request_id, report);
            }
        }
    }

    /// The answer to a rank's [`LocalRequest::Resolve`].
    pub(super) fn resolved(
        &mut self,
        conn: ConnId,
        request_id: u64,
        key: Id,
        result: Result<Vec<String>, OverlayError>,
    ) {
        let reply = match result {
            Ok(values) => LocalReply::Resolved { key, addrs: values.iter().filter_map(|v| v.parse().ok()).collect() },
            Err(OverlayError::NotConnected) => LocalReply::Failed { error: LocalError::NotConnected },
            Err(_) => LocalReply::Failed { error: LocalError::Timeout },
        };
        self.reply(conn, request_id, reply);
    }

    /// A control connection closed: its ranks' keys are withdrawn, its tools'
    /// watches and forwarded requests end.
    pub(super) fn conn_closed(&mut self, now: Instant, conn: ConnId) {
        for (name, value) in self.regs.remove(&conn).unwrap_or_default() {
            self.overlay(now, OverlayCommand::Unregister { name, value });
        }
        self.exec.handle_conn_closed(conn);
        self.drop_clients(|c| matches!(c, Client::Local { conn: c, .. } if *c == conn));
        self.cancel_forwards_of(conn);
        self.pending.retain(|_, p| match p {
            Pending::Resolve { conn: c, .. } | Pending::Nodes { conn: c, .. } | Pending::Diagnose { conn: c, .. } => {
                *c != conn
            }
            Pending::Locate { .. } | Pending::Gather { .. } | Pending::Submit { .. } => true,
        });
    }
}
