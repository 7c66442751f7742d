//! The node side of the local node protocol, behind a small trait so the overlay
//! node can replace the in-process table.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use p2pmp_core::local::{LocalError, LocalReply, LocalRequest};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame};
use tracing::{debug, warn};

/// How registrations are stored and found: names are process keys in hex,
/// values `ip:port`.
pub(crate) trait Registry: Send + Sync + 'static {
    fn register(&self, name: &str, value: &str, ttl: Duration) -> Result<(), LocalError>;
    fn unregister(&self, name: &str, value: &str);
    fn query(&self, name: &str) -> Result<Vec<String>, LocalError>;
}

/// Registrations held in this process (one node, no overlay).
#[derive(Debug, Default)]
pub(crate) struct LocalTable(Mutex<BTreeMap<String, Vec<String>>>);

impl Registry for LocalTable {
    fn register(&self, name: &str, value: &str, _ttl: Duration) -> Result<(), LocalError> {
        let mut t = self.0.lock().expect("registry lock");
        let v = t.entry(name.to_string()).or_default();
        if !v.iter().any(|x| x == value) {
            v.push(value.to_string());
        }
        Ok(())
    }

    fn unregister(&self, name: &str, value: &str) {
        let mut t = self.0.lock().expect("registry lock");
        if let Some(v) = t.get_mut(name) {
            v.retain(|x| x != value);
            if v.is_empty() {
                t.remove(name);
            }
        }
    }

    fn query(&self, name: &str) -> Result<Vec<String>, LocalError> {
        Ok(self.0.lock().expect("registry lock").get(name).cloned().unwrap_or_default())
    }
}

/// Registrations are refreshed by the node while their process lives.
pub(crate) const REGISTRATION_TTL: Duration = Duration::from_secs(30);

/// Serves the local node protocol on `listener`, one thread per connection. A
/// connection's registrations are withdrawn when it closes.
pub(crate) fn serve(listener: TcpListener, reg: Arc<dyn Registry>) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            match stream {
                Ok(s) => {
                    let reg = reg.clone();
                    std::thread::spawn(move || {
                        if let Err(e) = serve_one(s, &*reg) {
                            debug!(%e, "control connection ended");
                        }
                    });
                }
                Err(e) => warn!(%e, "accept on the control address failed"),
            }
        }
    });
}

fn serve_one(mut s: TcpStream, reg: &dyn Registry) -> anyhow::Result<()> {
    s.set_nodelay(true)?;
    let me = NodeAddr(s.local_addr()?);
    let mut dec = FrameDecoder::new(64 << 10);
    let mut owned: Vec<(String, String)> = Vec::new();
    let mut chunk = [0u8; 4096];
    let res = (|| -> anyhow::Result<()> {
        loop {
            let n = s.read(&mut chunk)?;
            if n == 0 {
                return Ok(());
            }
            dec.push(&chunk[..n]);
            while let Some(frame) = dec.decode()? {
                let env: Envelope<LocalRequest> = decode_envelope(frame)?;
                let reply = answer(reg, env.body, &mut owned);
                let mut out = BytesMut::new();
                encode_frame(&Envelope::new(me.id(), me, env.request_id, reply), &mut out, DEFAULT_MAX_FRAME)?;
                s.write_all(&out)?;
            }
        }
    })();
    for (name, value) in owned {
        reg.unregister(&name, &value);
    }
    res
}

fn answer(reg: &dyn Registry, req: LocalRequest, owned: &mut Vec<(String, String)>) -> LocalReply {
    match req {
        LocalRequest::Register { key, addr } => {
            let (name, value) = (key.to_string(), addr.to_string());
            match reg.register(&name, &value, REGISTRATION_TTL) {
                Ok(()) => {
                    owned.push((name, value));
                    LocalReply::Registered { key }
                }
                Err(error) => LocalReply::Failed { error },
            }
        }
        LocalRequest::Resolve { key } => match reg.query(&key.to_string()) {
            Ok(values) => LocalReply::Resolved { key, addrs: values.iter().filter_map(|v| v.parse().ok()).collect() },
            Err(error) => LocalReply::Failed { error },
        },
        LocalRequest::Unregister { key, addr } => {
            let (name, value) = (key.to_string(), addr.to_string());
            reg.unregister(&name, &value);
            owned.retain(|o| *o != (name.clone(), value.clone()));
            LocalReply::Unregistered { key }
        }
    }
}
