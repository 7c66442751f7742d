//! The smol runtime: one single-threaded executor per node, driven by `block_on`.

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use p2pmp_core::machine::Machine;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::{TcpListener, TcpStream};

use super::AsyncRuntime;
use crate::spawn::ShellIo;
use crate::{Driver, DriverConfig};

/// [`AsyncRuntime`] over smol: tasks go to the node's own executor.
#[derive(Debug, Clone)]
pub struct SmolRuntime {
    ex: Arc<smol::Executor<'static>>,
}

impl SmolRuntime {
    pub fn new(ex: Arc<smol::Executor<'static>>) -> Self {
        SmolRuntime { ex }
    }
}

impl AsyncRuntime for SmolRuntime {
    type Listener = TcpListener;
    type Reader = TcpStream;
    type Writer = TcpStream;

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, at: Instant) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            smol::Timer::at(at).await;
        })
    }

    fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.ex.spawn(fut).detach();
    }

    fn listener(&self, l: std::net::TcpListener) -> io::Result<TcpListener> {
        TcpListener::try_from(l)
    }

    async fn accept(l: &TcpListener) -> io::Result<(TcpStream, TcpStream, SocketAddr)> {
        let (s, remote) = l.accept().await?;
        s.set_nodelay(true)?;
        Ok((s.clone(), s, remote))
    }

    async fn connect(&self, addr: SocketAddr) -> io::Result<(TcpStream, TcpStream)> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok((s.clone(), s))
    }

    async fn read(r: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
        r.read(buf).await
    }

    async fn write_vectored(w: &mut TcpStream, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        w.write_vectored(bufs).await
    }
}

/// Runs a node on its own smol executor until it is told to stop.
pub(crate) fn run<M: Machine>(
    listener: std::net::TcpListener,
    cfg: DriverConfig,
    make: impl FnOnce(Instant) -> M,
    io: ShellIo<M>,
) -> io::Result<()> {
    let ex = Arc::new(smol::Executor::new());
    let rt = SmolRuntime::new(ex.clone());
    smol::block_on(ex.run(async move {
        let now = rt.now();
        let driver = Driver::new(make(now), cfg, now);
        super::run_loop(rt, listener, None, driver, io).await
    }))
}
