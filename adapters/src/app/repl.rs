//! Line commands on stdin, one result line each on stdout, for any overlay node.
//!
//! ```text
//! lookup <40-hex-id | name>         -> lookup key=HEX owner=ADDR owner_id=HEX hops=N
//! register <name> <value> [ttl-s]   -> register ok name=NAME value=VALUE
//! unregister <name> <value>         -> unregister ok name=NAME value=VALUE
//! query <name>                      -> query name=NAME values=V1,V2   (values= when none)
//! state                             -> state addr=ADDR id=HEX ...     (overlay-specific)
//! leave                             -> leave ok                       (then the program exits)
//! quit                              -> (exits)
//! ```
//!
//! A failure reads `<command> ... error=REASON` (the reason runs to the end of the
//! line), an unknown line `error unknown command ...`. The first line is
//! `listening ADDR`; unsolicited events print as `event joined`, `event
//! disconnected`, `event left`. Names and values are single words.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use p2pmp_core::id::Id;
use p2pmp_core::machine::Machine;
use p2pmp_core::overlay::{OverlayCommand, OverlayEvent, Token};
use tracing::info;

use crate::{Driver, NodeHandle};

/// Longest wait for the answer to a lookup or query (the overlay has its own
/// deadlines well below this).
const ANSWER_WAIT: Duration = Duration::from_secs(60);
/// Default registration lifetime (refreshed by the node while it lives).
const DEFAULT_TTL: Duration = Duration::from_secs(60);

type Pending = Arc<Mutex<BTreeMap<Token, std::sync::mpsc::Sender<OverlayEvent>>>>;

/// A lookup key: 40 hex digits as an id, anything else hashed as a name.
pub fn parse_key(s: &str) -> Id {
    s.parse().unwrap_or_else(|_| Id::hash(s))
}

/// Serves stdin until it ends, `quit`, or `leave`; then stops the node.
pub fn serve<M>(handle: NodeHandle<M>, state: fn(&Driver<M>) -> String) -> anyhow::Result<()>
where
    M: Machine<Command = OverlayCommand, Event = OverlayEvent> + 'static,
    M::CmdError: Send + Display,
{
    println!("listening {}", handle.local_addr());
    let pending: Pending = Arc::default();
    let (left_tx, left_rx) = std::sync::mpsc::channel();
    let events = handle.events().clone();
    let routes = pending.clone();
    std::thread::spawn(move || {
        while let Ok(e) = events.recv_blocking() {
            let token = match &e {
                OverlayEvent::LookupDone { token, .. } | OverlayEvent::QueryDone { token, .. } => Some(*token),
                _ => None,
            };
            if let Some(t) = token {
                // The lock is never held across a panic.
                let route = routes.lock().unwrap().remove(&t);
                if let Some(tx) = route {
                    let _ = tx.send(e);
                }
                continue;
            }
            match e {
                OverlayEvent::Joined => {
                    info!("joined the overlay");
                    println!("event joined");
                }
                OverlayEvent::Disconnected => {
                    info!("lost every contact, rejoining");
                    println!("event disconnected");
                }
                OverlayEvent::Left => {
                    info!("left the overlay");
                    println!("event left");
                    let _ = left_tx.send(());
                }
                other => info!(event = ?other, "event"),
            }
        }
    });
    let mut next_token: Token = 1;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((&cmd, rest)) = words.split_first() else { continue };
        match (cmd, rest) {
            ("lookup", [k]) => {
                let key = parse_key(k);
                let token = next_token;
                next_token += 1;
                let reply = ask(&handle, &pending, token, OverlayCommand::Lookup { token, key })?;
                match reply {
                    Err(e) => println!("lookup key={key} error={e}"),
                    Ok(OverlayEvent::LookupDone { result: Ok(r), .. }) => {
                        println!("lookup key={key} owner={} owner_id={} hops={}", r.owner, r.owner_id, r.hops);
                    }
                    Ok(OverlayEvent::LookupDone { result: Err(e), .. }) => println!("lookup key={key} error={e}"),
                    Ok(other) => println!("lookup key={key} error=unexpected answer {other:?}"),
                }
            }
            ("query", [name]) => {
                let token = next_token;
                next_token += 1;
                let reply = ask(&handle, &pending, token, OverlayCommand::Query { token, name: name.to_string() })?;
                match reply {
                    Err(e) => println!("query name={name} error={e}"),
                    Ok(OverlayEvent::QueryDone { result: Ok(mut values), .. }) => {
                        values.sort();
                        println!("query name={name} values={}", values.join(","));
                    }
                    Ok(OverlayEvent::QueryDone { result: Err(e), .. }) => println!("query name={name} error={e}"),
                    Ok(other) => println!("query name={name} error=unexpected answer {other:?}"),
                }
            }
            ("register", [name, value, ttl @ ..]) if ttl.len() <= 1 => {
                let ttl = match ttl.first().map(|t| t.parse::<f64>()) {
                    None => DEFAULT_TTL,
                    Some(Ok(s)) if s > 0.0 && s.is_finite() => Duration::from_secs_f64(s),
                    Some(_) => {
                        println!("register name={name} error=bad ttl");
                        continue;
                    }
                };
                let cmd = OverlayCommand::Register { name: name.to_string(), value: value.to_string(), ttl };
                match handle.command(cmd)? {
                    Ok(()) => println!("register ok name={name} value={value}"),
                    Err(e) => println!("register name={name} error={e}"),
                }
            }
            ("unregister", [name, value]) => {
                let cmd = OverlayCommand::Unregister { name: name.to_string(), value: value.to_string() };
                match handle.command(cmd)? {
                    Ok(()) => println!("unregister ok name={name} value={value}"),
                    Err(e) => println!("unregister name={name} error={e}"),
                }
            }
            ("state", []) => println!("{}", handle.inspect(state)?),
            ("leave", []) => {
                match handle.command(OverlayCommand::Leave)? {
                    Ok(()) => match left_rx.recv_timeout(ANSWER_WAIT) {
                        Ok(()) => println!("leave ok"),
                        Err(_) => println!("leave error=no confirmation"),
                    },
                    Err(e) => println!("leave error={e}"),
                }
                break;
            }
            ("quit", []) => break,
            _ => println!("error unknown command {line:?}"),
        }
    }
    handle.shutdown()?;
    Ok(())
}

/// Sends a command whose answer is an event carrying `token`, and waits for it.
fn ask<M>(
    handle: &NodeHandle<M>,
    pending: &Pending,
    token: Token,
    cmd: OverlayCommand,
) -> anyhow::Result<Result<OverlayEvent, String>>
where
    M: Machine<Command = OverlayCommand, Event = OverlayEvent> + 'static,
    M::CmdError: Send + Display,
{
    let (tx, rx) = std::sync::mpsc::channel();
    pending.lock().unwrap().insert(token, tx);
    if let Err(e) = handle.command(cmd)? {
        pending.lock().unwrap().remove(&token);
        return Ok(Err(e.to_string()));
    }
    Ok(rx.recv_timeout(ANSWER_WAIT).map_err(|_| "no answer".to_string()))
}
