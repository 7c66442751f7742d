//! Ctrl-C and SIGTERM: an embedded network's files removed on the way out, or
//! (`p2pjob run` against a daemon, as mpirun does) the job killed.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::signal::unix::{SignalKind, signal};

/// Runs `each` on a thread of its own at every Ctrl-C or SIGTERM from now on
/// (once this returns, the handlers are in place); the process no longer
/// dies of them by itself.
fn on_each_signal(mut each: impl FnMut() + Send + 'static) {
    let (ready_tx, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
                return;
            };
            let _ = ready_tx.send(());
            loop {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                each();
            }
        });
    });
    // Without handlers (the thread failed), the signals keep their default.
    let _ = ready.recv_timeout(std::time::Duration::from_secs(5));
}

/// On Ctrl-C or SIGTERM, removes `dirs` and exits with 130. The embedded
/// daemons' processes die with this process (they are spawned with
/// `PR_SET_PDEATHSIG`), so nothing is left behind.
pub(crate) fn cleanup_on_interrupt(dirs: Vec<PathBuf>) {
    on_interrupt(dirs, "interrupted; the embedded network is gone", 130);
}

/// On Ctrl-C or SIGTERM, removes `dirs`, says `what` and exits with `code`.
pub(crate) fn on_interrupt(dirs: Vec<PathBuf>, what: &'static str, code: i32) {
    on_each_signal(move || {
        for d in &dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        eprintln!("p2pjob: {what}");
        std::process::exit(code);
    });
}

/// Ctrl-C and SIGTERM counted from now on, instead of ending the process
/// (its owner looks at the count and decides).
#[derive(Debug, Clone)]
pub(crate) struct Interrupts(Arc<AtomicU32>);

impl Interrupts {
    pub(crate) fn count() -> Interrupts {
        let n = Arc::new(AtomicU32::new(0));
        let seen = Arc::clone(&n);
        on_each_signal(move || {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        Interrupts(n)
    }

    /// How many came so far.
    pub(crate) fn seen(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}
