//! The node side of the local node protocol, over a real overlay node: a Chord
//! node on the adapters' mio shell. Registrations become overlay registrations
//! (refreshed by the node while the process's control connection lives),
//! resolutions overlay queries.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bytes::BytesMut;
use p2pmp_adapters::{DriverConfig, NodeHandle, RuntimeKind, spawn_node};
use p2pmp_core::chord::{ChordConfig, ChordNode};
use p2pmp_core::local::{LocalError, LocalReply, LocalRequest};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::overlay::{OverlayCommand, OverlayError, OverlayEvent};
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame};
use tracing::{debug, warn};

/// Registrations are refreshed by the node while their process lives.
pub(crate) const REGISTRATION_TTL: Duration = Duration::from_secs(30);
/// How long a resolution may wait for the overlay.
const QUERY_WAIT: Duration = Duration::from_secs(10);

type QueryReply = Result<Vec<String>, OverlayError>;

/// One Chord node and the queries waiting for its answers.
pub(crate) struct OverlayRegistry {
    node: NodeHandle<ChordNode>,
    next_token: AtomicU64,
    waiting: Arc<Mutex<HashMap<u64, mpsc::Sender<QueryReply>>>>,
}

impl OverlayRegistry {
    /// Starts a Chord node on `listen` (joining through `bootstrap`, or alone) and
    /// waits until it is part of a network.
    pub(crate) fn start(listen: &str, bootstrap: Vec<NodeAddr>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(listen).with_context(|| format!("binding the overlay address {listen}"))?;
        let addr = NodeAddr(listener.local_addr()?);
        let seed = u64::from(addr.0.port()) ^ u64::from(std::process::id()) << 16;
        let cfg = ChordConfig::default();
        let node = spawn_node(RuntimeKind::Mio, listener, DriverConfig::default(), move |now| {
            ChordNode::new(cfg, addr, bootstrap, now, seed)
        })
        .context("starting the overlay node")?;
        let events = node.events().clone();
        let joined = node.inspect(|d| d.machine().is_joined()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let waiting: Arc<Mutex<HashMap<u64, mpsc::Sender<QueryReply>>>> = Arc::default();
        let (joined_tx, joined_rx) = mpsc::channel();
        let routes = waiting.clone();
        std::thread::spawn(move || {
            // Routes each query's answer to the control connection that asked.
            while let Ok(ev) = events.recv_blocking() {
                match ev {
                    OverlayEvent::QueryDone { token, result, .. } => {
                        if let Some(tx) = routes.lock().expect("routes lock").remove(&token) {
                            let _ = tx.send(result);
                        }
                    }
                    OverlayEvent::Joined => {
                        let _ = joined_tx.send(());
                    }
                    other => debug!(?other, "overlay event"),
                }
            }
        });
        if !joined {
            joined_rx.recv_timeout(Duration::from_secs(30)).context("the overlay node did not join in time")?;
        }
        Ok(OverlayRegistry { node, next_token: AtomicU64::new(1), waiting })
    }

    /// The overlay node's address (what other nodes bootstrap through).
    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        self.node.local_addr()
    }

    fn command(&self, cmd: OverlayCommand) -> Result<(), LocalError> {
        match self.node.command(cmd) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                warn!(%e, "overlay command refused");
                Err(LocalError::Refused)
            }
            Err(_) => Err(LocalError::NotConnected),
        }
    }

    fn register(&self, name: &str, value: &str) -> Result<(), LocalError> {
        let cmd = OverlayCommand::Register { name: name.into(), value: value.into(), ttl: REGISTRATION_TTL };
        self.command(cmd)
    }

    fn unregister(&self, name: &str, value: &str) {
        let _ = self.command(OverlayCommand::Unregister { name: name.into(), value: value.into() });
    }

    fn query(&self, name: &str) -> Result<Vec<String>, LocalError> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.waiting.lock().expect("routes lock").insert(token, tx);
        let res = self.command(OverlayCommand::Query { token, name: name.into() }).and_then(|()| {
            match rx.recv_timeout(QUERY_WAIT) {
                Ok(Ok(values)) => Ok(values),
                Ok(Err(OverlayError::NotConnected)) => Err(LocalError::NotConnected),
                Ok(Err(_)) | Err(_) => Err(LocalError::Timeout),
            }
        });
        self.waiting.lock().expect("routes lock").remove(&token);
        res
    }
}

/// Serves the local node protocol on `listener`, one thread per connection. A
/// connection's registrations are withdrawn when it closes.
pub(crate) fn serve(listener: TcpListener, reg: Arc<OverlayRegistry>) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            match stream {
                Ok(s) => {
                    let reg = reg.clone();
                    std::thread::spawn(move || {
                        if let Err(e) = serve_one(s, &reg) {
                            debug!(%e, "control connection ended");
                        }
                    });
                }
                Err(e) => warn!(%e, "accept on the control address failed"),
            }
        }
    });
}

fn serve_one(mut s: TcpStream, reg: &OverlayRegistry) -> anyhow::Result<()> {
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

fn answer(reg: &OverlayRegistry, req: LocalRequest, owned: &mut Vec<(String, String)>) -> LocalReply {
    match req {
        LocalRequest::Register { key, addr } => {
            let (name, value) = (key.to_string(), addr.to_string());
            match reg.register(&name, &value) {
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
