//! The tokio runtime: a current-thread runtime per node, tokio's clock.

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Instant;

use p2pmp_core::machine::Machine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::AsyncRuntime;
use crate::local::LocalConns;
use crate::spawn::ShellIo;
use crate::{Driver, DriverConfig};

/// [`AsyncRuntime`] over tokio; only valid inside a tokio runtime.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioRuntime;

impl AsyncRuntime for TokioRuntime {
    type Listener = TcpListener;
    type Reader = OwnedReadHalf;
    type Writer = OwnedWriteHalf;

    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep_until(&self, at: Instant) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep_until(at.into()))
    }

    fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        drop(tokio::spawn(fut));
    }

    fn listener(&self, l: std::net::TcpListener) -> io::Result<TcpListener> {
        TcpListener::from_std(l)
    }

    async fn accept(l: &TcpListener) -> io::Result<(OwnedReadHalf, OwnedWriteHalf, SocketAddr)> {
        let (s, remote) = l.accept().await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Ok((r, w, remote))
    }

    async fn connect(&self, addr: SocketAddr) -> io::Result<(OwnedReadHalf, OwnedWriteHalf)> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(s.into_split())
    }

    async fn read(r: &mut OwnedReadHalf, buf: &mut [u8]) -> io::Result<usize> {
        r.read(buf).await
    }

    async fn write_vectored(w: &mut OwnedWriteHalf, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        w.write_vectored(bufs).await
    }
}

/// Runs a node on a fresh current-thread tokio runtime until it is told to
/// stop; `side` (the application's own event loop, if any) runs on the same
/// runtime, so node and application are one event loop in one thread.
pub(crate) fn run<M: Machine>(
    listener: std::net::TcpListener,
    local: Option<(std::net::TcpListener, LocalConns<M>)>,
    cfg: DriverConfig,
    make: impl FnOnce(Instant) -> M,
    io: ShellIo<M>,
    side: Option<super::Sleep>,
) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let now = TokioRuntime.now();
        let driver = Driver::new(make(now), cfg, now);
        let side = side.map(tokio::spawn);
        let res = super::run_loop(TokioRuntime, listener, local, driver, io).await;
        if let Some(side) = side {
            // The side loop ends once the node's events stop (its channel closes).
            let _ = side.await;
        }
        res
    })
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::spawn::ShellIo;
    use crate::testing::PingPong;
    use p2pmp_core::machine::NodeAddr;

    /// tokio's clock drives the shell: with time paused, a silent peer is dropped at
    /// the hello deadline after five virtual seconds, in no real time.
    #[test]
    fn the_hello_deadline_runs_on_tokios_clock() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        let real = std::time::Instant::now();
        rt.block_on(async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.set_nonblocking(true).unwrap();
            let addr = l.local_addr().unwrap();
            let (_ctrl_tx, ctrl) = async_channel::unbounded();
            let (events, _ev_rx) = async_channel::unbounded();
            let now = TokioRuntime.now();
            let driver = Driver::new(PingPong::new(NodeAddr(addr)), DriverConfig::default(), now);
            tokio::spawn(super::super::run_loop(TokioRuntime, l, None, driver, ShellIo { ctrl, events }));
            let mut s = TcpStream::connect(addr).await.unwrap();
            let t0 = tokio::time::Instant::now();
            let mut buf = [0u8; 256];
            while s.read(&mut buf).await.unwrap() > 0 {} // the node's hello, then its close
            assert!(t0.elapsed() >= Duration::from_secs(5), "virtual {:?}", t0.elapsed());
        });
        assert!(real.elapsed() < Duration::from_secs(3), "real {:?}", real.elapsed());
    }
}
