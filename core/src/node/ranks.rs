//! The local node protocol as ranks use it: register a process key (kept while
//! the connection lives; a rank running here is known by it from then on),
//! resolve one through the overlay, withdraw one, with or without the public
//! key of the process's encrypted links; report checkpoints
//! ([`super::checkpoint`]).

use std::time::Instant;

use super::{Client, ConnId, DaemonNode, Pending};
use crate::id::Id;
use crate::local::{Endpoint, LocalError, LocalReply, LocalRequest};
use crate::overlay::{OverlayCommand, OverlayError};

impl DaemonNode {
    pub(super) fn on_local(&mut self, now: Instant, conn: ConnId, request_id: u64, req: LocalRequest) {
        match req {
            LocalRequest::Register { key, addr } => {
                self.register_process(now, conn, request_id, key, Endpoint { addr, key: None })
            }
            LocalRequest::RegisterKeyed { key, addr, public } => {
                self.register_process(now, conn, request_id, key, Endpoint { addr, key: Some(public) })
            }
            LocalRequest::Resolve { key } => self.resolve_process(now, conn, request_id, key, false),
            LocalRequest::ResolveKeyed { key } => self.resolve_process(now, conn, request_id, key, true),
            LocalRequest::Unregister { key, addr } => {
                let name = key.to_string();
                let mut gone = Vec::new();
                if let Some(v) = self.regs.get_mut(&conn) {
                    v.retain(|(n, value)| {
                        let this = *n == name && value.parse::<Endpoint>().is_ok_and(|e| e.addr == addr);
                        if this {
                            gone.push(value.clone());
                        }
                        !this
                    });
                }
                if gone.is_empty() {
                    // Not registered on this connection: withdrawn as the
                    // plain address it would have been registered as.
                    gone.push(addr.to_string());
                }
                for value in gone {
                    self.overlay(now, OverlayCommand::Unregister { name: name.clone(), value });
                }
                self.reply(conn, request_id, LocalReply::Unregistered { key });
            }
            report @ (LocalRequest::Checkpointed { .. } | LocalRequest::Recovered { .. }) => {
                self.on_rank_report(conn, request_id, report);
            }
        }
    }

    fn register_process(&mut self, now: Instant, conn: ConnId, request_id: u64, key: Id, at: Endpoint) {
        let (name, value) = (key.to_string(), at.to_string());
        let ttl = self.process_ttl;
        self.exec.handle_rank_registered(conn, key);
        if self.overlay(now, OverlayCommand::Register { name: name.clone(), value: value.clone(), ttl }) {
            self.regs.entry(conn).or_default().push((name, value));
            self.reply(conn, request_id, LocalReply::Registered { key });
        } else {
            self.reply(conn, request_id, LocalReply::Failed { error: LocalError::Refused });
        }
    }

    fn resolve_process(&mut self, now: Instant, conn: ConnId, request_id: u64, key: Id, keyed: bool) {
        if !self.overlay.is_joined() {
            return self.reply(conn, request_id, LocalReply::Failed { error: LocalError::NotConnected });
        }
        let token = self.token();
        if self.overlay(now, OverlayCommand::Query { token, name: key.to_string() }) {
            self.pending.insert(token, Pending::Resolve { conn, request_id, key, keyed });
        } else {
            self.reply(conn, request_id, LocalReply::Failed { error: LocalError::Refused });
        }
    }

    /// The answer to a rank's [`LocalRequest::Resolve`].
    pub(super) fn resolved(
        &mut self,
        conn: ConnId,
        request_id: u64,
        key: Id,
        keyed: bool,
        result: Result<Vec<String>, OverlayError>,
    ) {
        let reply = match result {
            Ok(values) => {
                let endpoints = values.iter().filter_map(|v| v.parse::<Endpoint>().ok());
                if keyed {
                    LocalReply::ResolvedKeyed { key, endpoints: endpoints.collect() }
                } else {
                    LocalReply::Resolved { key, addrs: endpoints.map(|e| e.addr).collect() }
                }
            }
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
