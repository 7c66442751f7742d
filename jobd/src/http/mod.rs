//! The status page: `jobd --http ADDR` serves, on its own thread and tokio
//! runtime, a page of the network's nodes, the overlay (the Chord ring, or the
//! CAN zones as boxes) and the jobs, kept
//! live by server-sent events, and the read-only JSON API it uses:
//!
//! - `GET /api/nodes`: `{"nodes": [...]}`, what `p2pjob nodes --json` prints;
//! - `GET /api/jobs`: `{"jobs": [...]}`, newest first: each job as `p2pjob
//!   status --json` lists it, plus `times` (unix ms when this page saw it first,
//!   saw every rank running, saw it end; null when not seen), `tail` (the last
//!   lines of each rank's output, by rank) and `transfers` (staging and output
//!   files in bytes, `done` of `total`);
//! - `GET /api/jobs/ID`: one of those jobs;
//! - `GET /api/ring`: every node at its id with predecessor, successors and
//!   fingers, `"source": "node"` where the daemon told them, `"computed"` else;
//! - `GET /api/zones`: on a CAN network, every node's zones (`lo` and `hi`
//!   corners as fractions of the space, one per dimension; the page draws the
//!   first two) and neighbours, as each node told them; `"nodes": []` on Chord;
//! - `GET /api/daemon`: the daemon asked (control and overlay address, and
//!   `overlay_kind`, `"chord"` or `"can"` once it answered), and why it cannot
//!   be asked, while it cannot;
//! - `GET /api/events`: server-sent events named `nodes`, `jobs`, `ring`,
//!   `zones` and `daemon`, each carrying that document whenever it changes (all of them
//!   first).
//!
//! It is a client of the daemon's control socket like `p2pjob` ([`collect`]):
//! it shows what any tool of this host could ask. There is no access control
//! yet, so it listens on loopback unless told otherwise.

mod collect;
mod ring;
mod view;
mod zones;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::Stream;
use tokio::sync::watch;
use tracing::{info, warn};

use view::{Docs, View};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// How long a stopping server waits for its connections to close.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// A running status page. Dropping it stops it.
#[derive(Debug)]
pub struct StatusServer {
    addr: SocketAddr,
    stop: Option<watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl StatusServer {
    /// Serves the page of the daemon whose control socket is `control` at `listen`.
    pub fn start(listen: SocketAddr, control: SocketAddr) -> anyhow::Result<StatusServer> {
        let listener =
            std::net::TcpListener::bind(listen).with_context(|| format!("binding the status page to {listen}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        if !addr.ip().is_loopback() {
            warn!(%addr, "the status page is open to anyone who can reach this address (no access control yet)");
        }
        let (stop, stopped) = watch::channel(false);
        let thread = std::thread::Builder::new().name(format!("jobd-http-{}", addr.port())).spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
            match rt {
                Ok(rt) => rt.block_on(serve(listener, control, stopped)),
                Err(e) => warn!(%e, "cannot start the status page's runtime"),
            }
        })?;
        info!(url = %format!("http://{addr}/"), "status page");
        Ok(StatusServer { addr, stop: Some(stop), thread: Some(thread) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(true);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(listener: std::net::TcpListener, control: SocketAddr, mut stopped: watch::Receiver<bool>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return warn!(%e, "the status page cannot listen"),
    };
    let mut view = View::new(control);
    let (docs, rx) = watch::channel(Arc::new(view.docs()));
    let collector = tokio::spawn(collect::run(control, view, docs));
    let mut until = stopped.clone();
    // Stopping ends the collector first: that ends every event stream, so the
    // open connections can close.
    let shutdown = async move {
        let _ = until.wait_for(|s| *s).await;
        collector.abort();
    };
    let server = axum::serve(listener, router(rx)).with_graceful_shutdown(shutdown);
    tokio::select! {
        r = server => if let Err(e) = r { warn!(%e, "the status page stopped") },
        _ = async { let _ = stopped.wait_for(|s| *s).await; tokio::time::sleep(STOP_GRACE).await } => {}
    }
}

/// The latest documents, as the collector publishes them.
type Feed = watch::Receiver<Arc<Docs>>;

fn router(docs: Feed) -> Router {
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }))
        .route("/api/nodes", get(|State(d): State<Feed>| async move { json(d.borrow().nodes.clone()) }))
        .route("/api/jobs", get(|State(d): State<Feed>| async move { json(d.borrow().jobs.clone()) }))
        .route("/api/jobs/{id}", get(one_job))
        .route("/api/ring", get(|State(d): State<Feed>| async move { json(d.borrow().ring.clone()) }))
        .route("/api/zones", get(|State(d): State<Feed>| async move { json(d.borrow().zones.clone()) }))
        .route("/api/daemon", get(|State(d): State<Feed>| async move { json(d.borrow().daemon.clone()) }))
        .route("/api/events", get(events))
        .with_state(docs)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

fn json(body: Arc<str>) -> Response {
    ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], body.to_string())
        .into_response()
}

async fn one_job(State(d): State<Feed>, Path(id): Path<String>) -> Response {
    let id = id.trim().to_ascii_lowercase();
    if id.parse::<p2pmp_core::id::Id>().is_err() {
        let body = serde_json::json!({"error": format!("{id:?} is not a job id (40 hex digits)")});
        return (StatusCode::BAD_REQUEST, json(body.to_string().into())).into_response();
    }
    match d.borrow().job.get(&id) {
        Some(doc) => json(doc.clone()),
        None => {
            let why = format!("no job {id} in the network (a finished job is forgotten after its retention time)");
            (StatusCode::NOT_FOUND, json(serde_json::json!({"error": why}).to_string().into())).into_response()
        }
    }
}

/// The documents last sent on one event stream.
#[derive(Default)]
struct Sent {
    last: Option<Docs>,
}

impl Sent {
    /// Events for every document of `now` that differs from the last sent.
    fn events(&mut self, now: &Docs) -> Vec<Event> {
        let named = |d: &Docs| {
            [
                ("nodes", d.nodes.clone()),
                ("jobs", d.jobs.clone()),
                ("ring", d.ring.clone()),
                ("zones", d.zones.clone()),
                ("daemon", d.daemon.clone()),
            ]
        };
        let before = self.last.as_ref().map(named);
        let mut out = Vec::new();
        for (i, (name, doc)) in named(now).into_iter().enumerate() {
            if before.as_ref().is_none_or(|b| !Arc::ptr_eq(&b[i].1, &doc)) {
                out.push(Event::default().event(name).data(doc.as_ref()));
            }
        }
        self.last = Some(now.clone());
        out
    }
}

async fn events(State(rx): State<Feed>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    use futures_util::StreamExt;
    let stream = futures_util::stream::unfold((rx, Sent::default(), true), |(mut rx, mut sent, first)| async move {
        if !first {
            rx.changed().await.ok()?;
        }
        let now = rx.borrow_and_update().clone();
        let events = sent.events(&now);
        Some((futures_util::stream::iter(events.into_iter().map(Ok)), (rx, sent, false)))
    })
    .flatten();
    Sse::new(stream).keep_alive(KeepAlive::default())
}
