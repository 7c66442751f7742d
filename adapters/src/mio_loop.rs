//! The raw mio shell: one readiness poll loop per node, no tasks, no channels on
//! the data path. It waits in `poll` until the driver's next deadline, then reads,
//! writes and reports `now` through the same [`Driver`] methods as the async shell.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::net::TcpListener as StdListener;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use p2pmp_core::guard::TokenBucket;
use p2pmp_core::machine::Machine;
use tracing::warn;

use crate::spawn::{ShellIo, apply_control, forward_events};
use crate::{ConnId, Driver, DriverConfig, IoRequest};

const LISTENER: Token = Token(0);
/// The token of the waker the application's handle pokes after each control message.
pub(crate) const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;
/// Bytes read per read call.
const READ_BUF: usize = 64 * 1024;
/// Bytes read from one connection per wake-up before the others get a turn.
const READ_BUDGET: usize = 1 << 20;
/// How long a stopping node keeps writing what it has queued.
const LINGER: Duration = Duration::from_millis(500);

fn token(conn: ConnId) -> Token {
    Token(conn.0 as usize + FIRST_CONN)
}

fn conn_of(t: Token) -> ConnId {
    ConnId((t.0 - FIRST_CONN) as u64)
}

struct Sock {
    stream: TcpStream,
    connecting: bool,
    /// The guard's byte rate for what this connection sends us.
    bytes: TokenBucket,
}

struct MioShell<M: Machine> {
    poll: Poll,
    driver: Driver<M>,
    socks: BTreeMap<ConnId, Sock>,
    buf: Vec<u8>,
    /// Connections that spent their read budget with bytes left (edge-triggered:
    /// no new event will come for those bytes).
    unread: Vec<ConnId>,
    /// Connections over the guard's byte rate, read again once back under.
    paused: BTreeMap<ConnId, Instant>,
}

/// Runs a node on `poll` until it is told to stop or its handle is dropped.
pub(crate) fn run<M: Machine>(
    poll: Poll,
    listener: StdListener,
    cfg: DriverConfig,
    make: impl FnOnce(Instant) -> M,
    io: ShellIo<M>,
) -> io::Result<()> {
    let mut listener = TcpListener::from_std(listener);
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
    let now = Instant::now();
    let driver = Driver::new(make(now), cfg, now);
    let mut sh = MioShell {
        poll,
        driver,
        socks: BTreeMap::new(),
        buf: vec![0; READ_BUF],
        unread: Vec::new(),
        paused: BTreeMap::new(),
    };
    let mut events = Events::with_capacity(256);
    let mut linger: Option<Instant> = None;
    loop {
        sh.service(&io);
        if let Some(until) = linger
            && (sh.driver.tx_idle() || Instant::now() >= until)
        {
            return Ok(());
        }
        let resume = sh.paused.values().min().copied();
        let deadline = [sh.driver.next_deadline(), linger, resume].into_iter().flatten().min();
        let mut timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if !sh.unread.is_empty() {
            timeout = Some(Duration::ZERO);
        }
        if let Err(e) = sh.poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let now = Instant::now();
        for conn in std::mem::take(&mut sh.unread) {
            sh.read(now, conn);
        }
        let due: Vec<ConnId> = sh.paused.iter().filter(|(_, t)| **t <= now).map(|(c, _)| *c).collect();
        for conn in due {
            sh.paused.remove(&conn);
            sh.read(now, conn);
        }
        for ev in events.iter() {
            match ev.token() {
                LISTENER => sh.accept(now, &listener),
                WAKER => {}
                t => sh.ready(
                    now,
                    conn_of(t),
                    ev.is_readable() || ev.is_read_closed() || ev.is_error(),
                    ev.is_writable(),
                ),
            }
        }
        loop {
            match io.ctrl.try_recv() {
                Ok(ctrl) => {
                    if !apply_control(&mut sh.driver, now, ctrl) {
                        linger.get_or_insert(now + LINGER);
                    }
                }
                Err(async_channel::TryRecvError::Empty) => break,
                Err(async_channel::TryRecvError::Closed) => return Ok(()),
            }
        }
        if sh.driver.next_deadline().is_some_and(|d| d <= now) {
            sh.driver.on_timeout(now);
        }
    }
}

impl<M: Machine> MioShell<M> {
    fn accept(&mut self, now: Instant, listener: &TcpListener) {
        loop {
            match listener.accept() {
                Ok((mut stream, remote)) => {
                    let Some(conn) = self.driver.on_accepted(now, remote) else { continue };
                    let reg = stream.set_nodelay(true).and_then(|()| {
                        self.poll.registry().register(&mut stream, token(conn), Interest::READABLE | Interest::WRITABLE)
                    });
                    match reg {
                        Ok(()) => {
                            let bytes = self.bucket(now);
                            self.socks.insert(conn, Sock { stream, connecting: false, bytes });
                        }
                        Err(e) => self.driver.on_closed(now, conn, format!("register failed: {e}")),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    warn!("accept failed: {e}");
                    return;
                }
            }
        }
    }

    fn bucket(&self, now: Instant) -> TokenBucket {
        let g = self.driver.guard();
        TokenBucket::new(g.bytes_per_s, g.byte_burst, now)
    }

    fn ready(&mut self, now: Instant, conn: ConnId, readable: bool, writable: bool) {
        let Some(sock) = self.socks.get_mut(&conn) else { return };
        if sock.connecting {
            match sock.stream.take_error() {
                Ok(None) => {}
                Ok(Some(e)) | Err(e) => return self.driver.on_connect_failed(now, conn, &e),
            }
            match sock.stream.peer_addr() {
                Ok(_) => {
                    sock.connecting = false;
                    if let Err(e) = sock.stream.set_nodelay(true) {
                        return self.driver.on_connect_failed(now, conn, &e);
                    }
                    self.driver.on_connected(now, conn);
                }
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return, // not yet
                Err(e) => return self.driver.on_connect_failed(now, conn, &e),
            }
        }
        if writable {
            self.write(now, conn);
        }
        if readable {
            self.read(now, conn);
        }
    }

    /// Reads until the socket would block (readiness is edge-triggered) or the
    /// budget is spent; in that case the connection is read again next turn.
    /// A connection over the guard's byte rate is read again once back under.
    fn read(&mut self, now: Instant, conn: ConnId) {
        let mut budget = READ_BUDGET;
        if self.paused.contains_key(&conn) {
            return;
        }
        loop {
            let Some(sock) = self.socks.get_mut(&conn) else { return };
            if budget == 0 {
                if !self.unread.contains(&conn) {
                    self.unread.push(conn);
                }
                return;
            }
            match sock.stream.read(&mut self.buf) {
                Ok(0) => return self.driver.on_closed(now, conn, "closed by peer"),
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    let pause = sock.bytes.charge(now, n as u64);
                    self.driver.on_bytes(now, conn, &self.buf[..n]);
                    if !pause.is_zero() {
                        self.paused.insert(conn, now + pause);
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.driver.on_closed(now, conn, format!("read failed: {e}")),
            }
        }
    }

    fn write(&mut self, now: Instant, conn: ConnId) {
        let Some(sock) = self.socks.get_mut(&conn) else { return };
        if sock.connecting {
            return;
        }
        if let Err(e) = self.driver.write_tx(conn, &mut sock.stream) {
            self.driver.on_closed(now, conn, format!("write failed: {e}"));
        }
    }

    /// Carries out what the driver asked for and hands its events on.
    fn service(&mut self, io: &ShellIo<M>) {
        loop {
            let now = Instant::now();
            if let Some(req) = self.driver.poll_io() {
                match req {
                    IoRequest::Connect { conn, addr } => {
                        let reg = TcpStream::connect(addr).and_then(|mut stream| {
                            let interest = Interest::READABLE | Interest::WRITABLE;
                            self.poll.registry().register(&mut stream, token(conn), interest).map(|()| stream)
                        });
                        match reg {
                            Ok(stream) => {
                                let bytes = self.bucket(now);
                                self.socks.insert(conn, Sock { stream, connecting: true, bytes });
                            }
                            Err(e) => self.driver.on_connect_failed(now, conn, &e),
                        }
                    }
                    IoRequest::Close { conn } => {
                        self.paused.remove(&conn);
                        if let Some(mut s) = self.socks.remove(&conn) {
                            let _ = self.poll.registry().deregister(&mut s.stream);
                        }
                    }
                }
                continue;
            }
            if let Some(conn) = self.driver.poll_writable() {
                self.write(now, conn);
                continue;
            }
            break;
        }
        forward_events(&mut self.driver, &io.events);
    }
}
