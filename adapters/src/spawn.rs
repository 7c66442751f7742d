//! Runs one machine on a chosen runtime in its own thread, and the handle the
//! application keeps: commands in, events out, read-only inspection.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::str::FromStr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use async_channel::{Receiver, Sender};
use p2pmp_core::machine::Machine;

use crate::{Driver, DriverConfig};

/// Which shell drives the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    Tokio,
    Smol,
    Mio,
}

impl RuntimeKind {
    /// Every runtime this build has a shell for.
    pub fn available() -> Vec<RuntimeKind> {
        let mut v = Vec::new();
        if cfg!(feature = "tokio") {
            v.push(RuntimeKind::Tokio);
        }
        if cfg!(feature = "smol") {
            v.push(RuntimeKind::Smol);
        }
        if cfg!(feature = "mio") {
            v.push(RuntimeKind::Mio);
        }
        v
    }
}

impl fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuntimeKind::Tokio => "tokio",
            RuntimeKind::Smol => "smol",
            RuntimeKind::Mio => "mio",
        })
    }
}

impl FromStr for RuntimeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tokio" => Ok(RuntimeKind::Tokio),
            "smol" => Ok(RuntimeKind::Smol),
            "mio" => Ok(RuntimeKind::Mio),
            _ => Err(format!("unknown runtime {s:?} (tokio, smol or mio)")),
        }
    }
}

/// A read-only look at the driver (and through it the machine), run in its thread.
pub type Inspector<M> = Box<dyn FnOnce(&Driver<M>) + Send>;

/// What the application sends to a running node.
pub enum Control<M: Machine> {
    /// A command, and where its immediate result goes.
    Command(M::Command, Sender<Result<(), M::CmdError>>),
    /// A command whose result nobody waits for (refusals are logged).
    Post(M::Command),
    Inspect(Inspector<M>),
    /// Stop: pending writes get a short grace period, then every socket closes.
    Shutdown,
}

impl<M: Machine> fmt::Debug for Control<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Control::Command(..) => "Command",
            Control::Post(_) => "Post",
            Control::Inspect(_) => "Inspect",
            Control::Shutdown => "Shutdown",
        })
    }
}

/// Applies one control message; `false` once the node should stop.
pub(crate) fn apply_control<M: Machine>(driver: &mut Driver<M>, now: Instant, ctrl: Control<M>) -> bool {
    match ctrl {
        Control::Command(cmd, reply) => {
            let res = driver.on_command(now, cmd);
            let _ = reply.try_send(res);
            true
        }
        Control::Post(cmd) => {
            if let Err(e) = driver.on_command(now, cmd) {
                tracing::debug!(%e, "the node refused a command");
            }
            true
        }
        Control::Inspect(f) => {
            f(driver);
            true
        }
        Control::Shutdown => false,
    }
}

/// Hands the driver's events to the application (dropped if nobody listens).
#[cfg(feature = "mio")]
pub(crate) fn forward_events<M: Machine>(driver: &mut Driver<M>, events: &Sender<M::Event>) {
    while let Some(e) = driver.poll_event() {
        let _ = events.try_send(e);
    }
}

/// The channels a shell runs with.
pub(crate) struct ShellIo<M: Machine> {
    pub(crate) ctrl: Receiver<Control<M>>,
    pub(crate) events: Sender<M::Event>,
}

/// The node has stopped; the command was not carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the node has stopped")
    }
}

impl std::error::Error for Stopped {}

type Wake = Arc<dyn Fn() + Send + Sync>;

/// Sends commands and inspections to a running node from any thread; cloneable.
/// Fails with [`Stopped`] once the node is gone.
pub struct Remote<M: Machine> {
    ctrl: Sender<Control<M>>,
    wake: Wake,
}

impl<M: Machine> Clone for Remote<M> {
    fn clone(&self) -> Self {
        Remote { ctrl: self.ctrl.clone(), wake: self.wake.clone() }
    }
}

impl<M: Machine> fmt::Debug for Remote<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote").finish_non_exhaustive()
    }
}

impl<M: Machine> Remote<M> {
    fn send(&self, c: Control<M>) -> Result<(), Stopped> {
        self.ctrl.send_blocking(c).map_err(|_| Stopped)?;
        (self.wake)();
        Ok(())
    }

    /// Runs `cmd` on the machine and waits for its immediate result (from a
    /// thread of its own: never from a task on the node's runtime).
    pub fn command(&self, cmd: M::Command) -> Result<Result<(), M::CmdError>, Stopped> {
        let (tx, rx) = async_channel::bounded(1);
        self.send(Control::Command(cmd, tx))?;
        rx.recv_blocking().map_err(|_| Stopped)
    }

    /// Hands `cmd` to the machine without waiting (never blocks: the control
    /// channel is unbounded); a refusal is logged by the node.
    pub fn post(&self, cmd: M::Command) -> Result<(), Stopped> {
        self.ctrl.try_send(Control::Post(cmd)).map_err(|_| Stopped)?;
        (self.wake)();
        Ok(())
    }

    /// Runs `f` on the driver in the node's thread and returns what it returns.
    pub fn inspect<T: Send + 'static>(&self, f: impl FnOnce(&Driver<M>) -> T + Send + 'static) -> Result<T, Stopped> {
        let (tx, rx) = async_channel::bounded(1);
        self.send(Control::Inspect(Box::new(move |d| {
            let _ = tx.try_send(f(d));
        })))?;
        rx.recv_blocking().map_err(|_| Stopped)
    }
}

/// A running node. Dropping it stops the node.
pub struct NodeHandle<M: Machine> {
    addr: SocketAddr,
    remote: Remote<M>,
    events: Receiver<M::Event>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl<M: Machine> fmt::Debug for NodeHandle<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeHandle").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl<M: Machine> NodeHandle<M> {
    /// The address the node listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A cloneable sender of commands and inspections.
    pub fn remote(&self) -> Remote<M> {
        self.remote.clone()
    }

    /// Runs `cmd` on the machine and waits for its immediate result.
    pub fn command(&self, cmd: M::Command) -> Result<Result<(), M::CmdError>, Stopped> {
        self.remote.command(cmd)
    }

    /// Runs `f` on the driver in the node's thread and returns what it returns.
    pub fn inspect<T: Send + 'static>(&self, f: impl FnOnce(&Driver<M>) -> T + Send + 'static) -> Result<T, Stopped> {
        self.remote.inspect(f)
    }

    /// The machine's events, in order (`recv_blocking` from plain threads).
    pub fn events(&self) -> &Receiver<M::Event> {
        &self.events
    }

    /// Stops the node and waits for its thread.
    pub fn shutdown(mut self) -> io::Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> io::Result<()> {
        let _ = self.remote.send(Control::Shutdown);
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| Err(io::Error::other("node thread panicked"))),
            None => Ok(()),
        }
    }
}

impl<M: Machine> Drop for NodeHandle<M> {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The listener made non-blocking, and the channels between a node and its handle.
type Prepared<M> = (SocketAddr, Sender<Control<M>>, ShellIo<M>, Receiver<<M as Machine>::Event>);

fn prepare<M: Machine>(listener: &TcpListener) -> io::Result<Prepared<M>> {
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let (ctrl_tx, ctrl_rx) = async_channel::unbounded();
    let (ev_tx, ev_rx) = async_channel::unbounded();
    Ok((addr, ctrl_tx, ShellIo { ctrl: ctrl_rx, events: ev_tx }, ev_rx))
}

/// Starts a node on `runtime` in a new thread, serving `listener`. The machine is
/// built in that thread by `make(now)`, on the runtime's clock.
pub fn spawn_node<M, F>(
    runtime: RuntimeKind,
    listener: TcpListener,
    cfg: DriverConfig,
    make: F,
) -> io::Result<NodeHandle<M>>
where
    M: Machine + 'static,
    M::Command: Send,
    M::Event: Send,
    M::CmdError: Send,
    F: FnOnce(Instant) -> M + Send + 'static,
{
    let (addr, ctrl_tx, io, ev_rx) = prepare(&listener)?;
    let name = format!("p2pmp-{runtime}-{}", addr.port());
    let (wake, body): (Wake, Box<dyn FnOnce() -> io::Result<()> + Send>) = match runtime {
        #[cfg(feature = "tokio")]
        RuntimeKind::Tokio => {
            (Arc::new(|| {}), Box::new(move || crate::runtime::tokio::run(listener, None, cfg, make, io, None)))
        }
        #[cfg(feature = "smol")]
        RuntimeKind::Smol => (Arc::new(|| {}), Box::new(move || crate::runtime::smol::run(listener, cfg, make, io))),
        #[cfg(feature = "mio")]
        RuntimeKind::Mio => {
            let poll = mio::Poll::new()?;
            let waker = Arc::new(mio::Waker::new(poll.registry(), crate::mio_loop::WAKER)?);
            let wake: Wake = Arc::new(move || {
                let _ = waker.wake();
            });
            (wake, Box::new(move || crate::mio_loop::run(poll, listener, cfg, make, io)))
        }
        #[allow(unreachable_patterns)]
        other => {
            return Err(io::Error::new(io::ErrorKind::Unsupported, format!("built without the {other} feature")));
        }
    };
    let thread = std::thread::Builder::new().name(name).spawn(body)?;
    Ok(NodeHandle { addr, remote: Remote { ctrl: ctrl_tx, wake }, events: ev_rx, thread: Some(thread) })
}

/// Starts a daemon node on a tokio runtime in a new thread: the node serving
/// its peers on `listener` and the local control connections of its host on
/// `control` (with `codec`), and the application's own event loop, `side(events,
/// remote)`, on the same runtime: one event loop per daemon. `side` must never
/// block (use [`Remote::post`], and a blocking pool for file work); the node
/// stops when the returned handle is dropped or shut down, and `side` should
/// end once its events channel closes.
#[cfg(feature = "tokio")]
pub fn spawn_daemon<M, F, S, Fut>(
    listener: TcpListener,
    control: TcpListener,
    codec: impl crate::local::LocalCodec<M> + 'static,
    cfg: DriverConfig,
    make: F,
    side: S,
) -> io::Result<NodeHandle<M>>
where
    M: Machine + 'static,
    M::Command: Send,
    M::Event: Send,
    M::CmdError: Send,
    F: FnOnce(Instant) -> M + Send + 'static,
    S: FnOnce(Receiver<M::Event>, Remote<M>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (addr, ctrl_tx, io, ev_rx) = prepare(&listener)?;
    control.set_nonblocking(true)?;
    let remote = Remote { ctrl: ctrl_tx, wake: Arc::new(|| {}) };
    let side: crate::runtime::Sleep = Box::pin(side(ev_rx.clone(), remote.clone()));
    let local = Some((control, crate::local::LocalConns::new(codec).guarded(&cfg.guard)));
    let name = format!("p2pmp-daemon-{}", addr.port());
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || crate::runtime::tokio::run(listener, local, cfg, make, io, Some(side)))?;
    Ok(NodeHandle { addr, remote, events: ev_rx, thread: Some(thread) })
}
