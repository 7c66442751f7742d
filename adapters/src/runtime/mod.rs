//! The async shell, written once for tokio and smol over the small
//! [`AsyncRuntime`] trait (in the manner of quinn's `Runtime`).
//!
//! One loop task owns the [`Driver`] and the node's [`LocalConns`]; per
//! connection (a peer's, or a local control connection), a reader task sends
//! the bytes it reads and a writer task writes the chunks it is handed with
//! vectored writes and reports back. The loop waits on those reports, the
//! application's control channel and one timer, reset only when the deadline
//! changes.

use std::collections::{BTreeMap, VecDeque};
use std::future::{Future, poll_fn};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::{Duration, Instant};

use async_channel::Sender;
use bytes::Bytes;
use p2pmp_core::guard::TokenBucket;
use p2pmp_core::machine::Machine;
use tracing::{debug, warn};

use crate::local::LocalConns;
use crate::spawn::{ShellIo, apply_control};
use p2pmp_core::wire::vectored;

use crate::{ConnId, Driver, IoRequest};

#[cfg(feature = "smol")]
pub mod smol;
#[cfg(feature = "tokio")]
pub mod tokio;

/// Inputs drained per wake-up before control messages and timers get a turn.
const INPUT_BUDGET: usize = 256;
/// Bytes read per read call.
const READ_BUF: usize = 64 * 1024;
/// How long a stopping node waits for its writers.
const LINGER: Duration = Duration::from_millis(500);
/// How long the accept loop rests after a failed accept (out of descriptors:
/// retrying at once would spin and log without end).
const ACCEPT_REST: Duration = Duration::from_millis(100);

/// A boxed timer future.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the async shell needs from a runtime. Everything else is shared.
pub trait AsyncRuntime: Clone + Send + Sync + 'static {
    type Listener: Send + Sync + 'static;
    type Reader: Send + 'static;
    type Writer: Send + 'static;

    /// The runtime's clock (tokio's allows paused-time tests).
    fn now(&self) -> Instant;
    /// Completes at `at`.
    fn sleep_until(&self, at: Instant) -> Sleep;
    /// Runs `fut` in the background until it ends or the runtime stops.
    fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static);
    /// Takes over a bound, non-blocking std listener.
    fn listener(&self, l: std::net::TcpListener) -> io::Result<Self::Listener>;
    /// The next inbound connection, split for reading and writing, TCP_NODELAY on.
    fn accept(l: &Self::Listener) -> impl Future<Output = io::Result<(Self::Reader, Self::Writer, SocketAddr)>> + Send;
    /// A connection to `addr`, split, TCP_NODELAY on.
    fn connect(&self, addr: SocketAddr) -> impl Future<Output = io::Result<(Self::Reader, Self::Writer)>> + Send;
    fn read(r: &mut Self::Reader, buf: &mut [u8]) -> impl Future<Output = io::Result<usize>> + Send;
    fn write_vectored(w: &mut Self::Writer, bufs: &[IoSlice<'_>]) -> impl Future<Output = io::Result<usize>> + Send;
}

/// Which of two futures finished first.
pub(crate) enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Polls `a` then `b`; the first ready wins and the other is dropped.
pub(crate) async fn race<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
    let mut a = pin!(a);
    let mut b = pin!(b);
    poll_fn(|cx| {
        if let Poll::Ready(x) = a.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(x));
        }
        if let Poll::Ready(y) = b.as_mut().poll(cx) {
            return Poll::Ready(Either::Right(y));
        }
        Poll::Pending
    })
    .await
}

/// One connection of the loop: a peer's, or a local control connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Link {
    Peer(ConnId),
    Local(u64),
}

/// Reports from the connection tasks to the loop.
enum Input<R: AsyncRuntime> {
    Accepted(R::Reader, R::Writer, SocketAddr),
    LocalAccepted(R::Reader, R::Writer),
    Connected(ConnId, R::Reader, R::Writer),
    ConnectFailed(ConnId, io::Error),
    Data(Link, Bytes),
    Written(Link, usize),
    Closed(Link, String),
}

/// The loop's side of one connection's tasks. Dropping it stops both.
struct ConnIo {
    writer: Sender<Vec<Bytes>>,
    _stop: Sender<()>,
    busy: bool,
}

struct Shell<R: AsyncRuntime, M: Machine> {
    rt: R,
    driver: Driver<M>,
    local: LocalConns<M>,
    conns: BTreeMap<Link, ConnIo>,
    inputs: Sender<Input<R>>,
    io: ShellIo<M>,
}

/// Accepts connections on `listener` for the loop, `local` ones or peers'.
fn accept_into<R: AsyncRuntime>(rt: &R, listener: R::Listener, local: bool, inputs: Sender<Input<R>>) {
    let rt2 = rt.clone();
    rt.spawn(async move {
        let mut failing = false;
        loop {
            match R::accept(&listener).await {
                Ok((r, w, remote)) => {
                    failing = false;
                    let input = if local { Input::LocalAccepted(r, w) } else { Input::Accepted(r, w, remote) };
                    if inputs.send(input).await.is_err() {
                        return;
                    }
                }
                // Out of descriptors and the like: log once per streak, rest,
                // and keep serving the connections already open.
                Err(e) => {
                    if !failing {
                        warn!("accept failed: {e} (retrying every {ACCEPT_REST:?})");
                    }
                    failing = true;
                    rt2.sleep_until(rt2.now() + ACCEPT_REST).await;
                }
            }
        }
    });
}

/// Runs `driver` until the application asks it to stop or drops its handle;
/// with `local`, also serves local control connections on its listener.
pub(crate) async fn run_loop<R: AsyncRuntime, M: Machine>(
    rt: R,
    listener: std::net::TcpListener,
    local: Option<(std::net::TcpListener, LocalConns<M>)>,
    driver: Driver<M>,
    io: ShellIo<M>,
) -> io::Result<()> {
    let (in_tx, in_rx) = async_channel::bounded::<Input<R>>(1024);
    accept_into(&rt, rt.listener(listener)?, false, in_tx.clone());
    let local = match local {
        Some((l, conns)) => {
            accept_into(&rt, rt.listener(l)?, true, in_tx.clone());
            conns
        }
        None => LocalConns::new(crate::local::NoLocal),
    };
    let mut sh = Shell { rt, driver, local, conns: BTreeMap::new(), inputs: in_tx, io };
    let mut timer: Option<(Instant, Sleep)> = None;
    let mut linger: Option<Instant> = None;
    loop {
        sh.service();
        if let Some(until) = linger
            && (sh.driver.tx_idle() || sh.rt.now() >= until)
        {
            return Ok(());
        }
        let deadline = [sh.driver.next_deadline(), linger].into_iter().flatten().min();
        if timer.as_ref().map(|t| t.0) != deadline {
            timer = deadline.map(|d| (d, sh.rt.sleep_until(d)));
        }
        let sleep = async {
            match timer.as_mut() {
                Some((_, s)) => s.as_mut().await,
                None => std::future::pending().await,
            }
        };
        let woke = race(in_rx.recv(), race(sh.io.ctrl.recv(), sleep)).await;
        let now = sh.rt.now();
        match woke {
            Either::Left(Ok(input)) => {
                sh.input(now, input);
                for _ in 1..INPUT_BUDGET {
                    match in_rx.try_recv() {
                        Ok(input) => sh.input(now, input),
                        Err(_) => break,
                    }
                }
            }
            // The loop holds a sender itself, so the channel never closes.
            Either::Left(Err(_)) => unreachable!("input channel closed"),
            Either::Right(Either::Left(Ok(ctrl))) => {
                if !apply_control(&mut sh.driver, now, ctrl) {
                    linger.get_or_insert(now + LINGER);
                }
            }
            Either::Right(Either::Left(Err(_))) => return Ok(()), // every handle dropped
            Either::Right(Either::Right(())) => timer = None,
        }
        while let Ok(ctrl) = sh.io.ctrl.try_recv() {
            if !apply_control(&mut sh.driver, now, ctrl) {
                linger.get_or_insert(now + LINGER);
            }
        }
        if sh.driver.next_deadline().is_some_and(|d| d <= now) {
            sh.driver.on_timeout(now);
        }
    }
}

impl<R: AsyncRuntime, M: Machine> Shell<R, M> {
    fn input(&mut self, now: Instant, input: Input<R>) {
        match input {
            Input::Accepted(r, w, remote) => {
                if let Some(conn) = self.driver.on_accepted(now, remote) {
                    self.start(Link::Peer(conn), r, w);
                }
            }
            Input::LocalAccepted(r, w) => {
                if let Some(conn) = self.local.on_accepted(now) {
                    self.start(Link::Local(conn), r, w);
                }
            }
            Input::Connected(conn, r, w) => {
                if self.driver.is_open(conn) {
                    self.start(Link::Peer(conn), r, w);
                    self.driver.on_connected(now, conn);
                }
            }
            Input::ConnectFailed(conn, e) => self.driver.on_connect_failed(now, conn, &e),
            Input::Data(Link::Peer(conn), data) => self.driver.on_bytes(now, conn, &data),
            Input::Data(Link::Local(conn), data) => self.local.on_bytes(&mut self.driver, now, conn, &data),
            Input::Written(link, n) => {
                if let Link::Peer(conn) = link {
                    self.driver.on_tx_done(conn, n);
                }
                if let Some(c) = self.conns.get_mut(&link) {
                    c.busy = false;
                    Self::write(&mut self.driver, &mut self.local, link, c);
                }
            }
            Input::Closed(Link::Peer(conn), why) => self.driver.on_closed(now, conn, why),
            Input::Closed(link @ Link::Local(conn), _) => {
                self.conns.remove(&link);
                self.local.on_closed(&mut self.driver, now, conn);
            }
        }
    }

    /// Carries out what the driver asked for and hands its events on.
    fn service(&mut self) {
        while let Some(req) = self.driver.poll_io() {
            match req {
                IoRequest::Connect { conn, addr } => {
                    let (rt, inputs) = (self.rt.clone(), self.inputs.clone());
                    self.rt.spawn(async move {
                        let input = match rt.connect(addr).await {
                            Ok((r, w)) => Input::Connected(conn, r, w),
                            Err(e) => Input::ConnectFailed(conn, e),
                        };
                        let _ = inputs.send(input).await;
                    });
                }
                IoRequest::Close { conn } => {
                    self.conns.remove(&Link::Peer(conn));
                }
            }
        }
        while let Some(conn) = self.driver.poll_writable() {
            if let Some(c) = self.conns.get_mut(&Link::Peer(conn)) {
                Self::write(&mut self.driver, &mut self.local, Link::Peer(conn), c);
            }
        }
        // Replies go to their local connections; the rest to the application.
        while let Some(e) = self.driver.poll_event() {
            if let Some(e) = self.local.route(e) {
                let _ = self.io.events.try_send(e);
            }
        }
        while let Some(conn) = self.local.poll_writable() {
            if let Some(c) = self.conns.get_mut(&Link::Local(conn)) {
                Self::write(&mut self.driver, &mut self.local, Link::Local(conn), c);
            }
        }
        while let Some(conn) = self.local.poll_close() {
            self.conns.remove(&Link::Local(conn));
        }
    }

    fn write(driver: &mut Driver<M>, local: &mut LocalConns<M>, link: Link, c: &mut ConnIo) {
        if c.busy {
            return; // the rest goes when the writer reports back
        }
        let chunks = match link {
            Link::Peer(conn) => driver.take_tx(conn),
            Link::Local(conn) => local.take_tx(conn),
        };
        if !chunks.is_empty() {
            c.busy = true;
            let _ = c.writer.try_send(chunks);
        }
    }

    /// Starts the reader and writer tasks of a connection. The reader keeps to
    /// the guard's byte rate: past it, it pauses (and TCP pushes back on the
    /// sender) until the connection is back under.
    fn start(&mut self, conn: Link, mut r: R::Reader, mut w: R::Writer) {
        let (wtx, wrx) = async_channel::unbounded::<Vec<Bytes>>();
        let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
        let inputs = self.inputs.clone();
        let rt = self.rt.clone();
        let g = self.driver.guard();
        let mut bytes = TokenBucket::new(g.bytes_per_s, g.byte_burst, rt.now());
        self.rt.spawn(async move {
            let mut buf = vec![0u8; READ_BUF];
            loop {
                let mut pause = Duration::ZERO;
                let input = match race(R::read(&mut r, &mut buf), stop_rx.recv()).await {
                    Either::Right(_) => return, // the loop dropped the connection
                    Either::Left(Ok(0)) => Input::Closed(conn, "closed by peer".into()),
                    Either::Left(Ok(n)) => {
                        pause = bytes.charge(rt.now(), n as u64);
                        Input::Data(conn, Bytes::copy_from_slice(&buf[..n]))
                    }
                    Either::Left(Err(e)) => Input::Closed(conn, format!("read failed: {e}")),
                };
                let last = matches!(input, Input::Closed(..));
                if inputs.send(input).await.is_err() || last {
                    return;
                }
                if !pause.is_zero()
                    && matches!(race(rt.sleep_until(rt.now() + pause), stop_rx.recv()).await, Either::Right(_))
                {
                    return;
                }
            }
        });
        let inputs = self.inputs.clone();
        self.rt.spawn(async move {
            while let Ok(chunks) = wrx.recv().await {
                let n = chunks.iter().map(Bytes::len).sum();
                let input = match write_all::<R>(&mut w, chunks).await {
                    Ok(()) => Input::Written(conn, n),
                    Err(e) => Input::Closed(conn, format!("write failed: {e}")),
                };
                let last = matches!(input, Input::Closed(..));
                if inputs.send(input).await.is_err() || last {
                    return;
                }
            }
            debug!(?conn, "writer done");
        });
        self.conns.insert(conn, ConnIo { writer: wtx, _stop: stop_tx, busy: false });
    }
}

/// Writes every chunk, as few vectored writes as the socket allows.
async fn write_all<R: AsyncRuntime>(w: &mut R::Writer, chunks: Vec<Bytes>) -> io::Result<()> {
    let mut q: VecDeque<Bytes> = chunks.into();
    while !q.is_empty() {
        let n = {
            let mut iov = [IoSlice::new(&[]); 64];
            let k = vectored::gather(&q, &mut iov);
            R::write_vectored(w, &iov[..k]).await?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        vectored::consume(&mut q, n);
    }
    Ok(())
}
