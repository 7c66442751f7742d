//! The status page in a real browser: headless Chromium driven through
//! chromedriver (W3C WebDriver over plain HTTP). The nodes appear; a job
//! submitted during the test appears, runs and finishes on the page without a
//! reload; pointing at a ring node shows its neighbours. On CAN the page
//! draws every node's zone as a box, and pointing at one shows its
//! neighbours. Screenshots are kept at `target/status-page.png` and
//! `target/status-page-can.png`.
//!
//! Without Chromium and chromedriver (`apt-get install chromium
//! chromium-driver`; or name them in P2PMP_CHROMIUM and P2PMP_CHROMEDRIVER)
//! the test says so and passes, unless P2PMP_REQUIRE_CHROMIUM=1.

mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use p2pmp_core::job::JobDescription;
use serde_json::{Value, json};

/// The key W3C WebDriver names element references by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// `env` if set, else the first of `names` on $PATH.
fn find(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).flat_map(|d| names.iter().map(move |n| d.join(n))).find(|p| p.is_file())
}

/// A chromedriver with one headless Chromium session; dropped, both end.
struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    profile: PathBuf,
}

impl Browser {
    fn start(chromium: &std::path::Path, chromedriver: &std::path::Path) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let profile = std::env::temp_dir().join(format!("p2pmp-chromium-{}-{port}", std::process::id()));
        let mut b = Browser { driver, addr, session: String::new(), profile };
        web::until(Duration::from_secs(20), "chromedriver", || {
            let r = web::request(addr, "GET", "/status", None).ok()?;
            r.json()["value"]["ready"].as_bool().filter(|r| *r)
        });
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1400,1250",
            &format!("--user-data-dir={}", b.profile.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium.to_string_lossy(), "args": args}}}});
        let v = b.call("POST", "/session", Some(caps));
        b.session = v["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {v}")).to_owned();
        b
    }

    /// A WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body).unwrap_or_else(|v| panic!("{method} {path}: {v}"))
    }

    /// A WebDriver command; its `value`, or the whole answer if it failed.
    fn try_call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, Value> {
        let body = body.map(|b| b.to_string());
        let r = web::request(self.addr, method, path, body.as_deref()).unwrap_or_else(|e| panic!("{path}: {e}"));
        let v = r.json();
        if r.status == 200 { Ok(v["value"].clone()) } else { Err(v) }
    }

    fn session(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    /// Finds the element `css` names and posts the command `command` makes
    /// for it. The page redraws as reports arrive (and on a hover), so the
    /// element found may be gone by the time the command reaches it: then
    /// it is found again, a moment later.
    fn on_element(&self, css: &str, command: impl Fn(&Value) -> (String, Value)) {
        let mut last = Value::Null;
        for _ in 0..20 {
            let (path, body) = command(&self.element(css));
            match self.try_call("POST", &format!("/session/{}{path}", self.session), Some(body)) {
                Ok(_) => return,
                Err(v) if v["value"]["error"] == "stale element reference" => last = v,
                Err(v) => panic!("POST {path} on {css}: {v}"),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{css} was redrawn under every one of 20 tries: {last}");
    }

    /// Runs `js` (a function body) in the page; what it returns.
    fn script(&self, js: &str) -> Value {
        self.session("POST", "/execute/sync", Some(json!({"script": js, "args": []})))
    }

    fn element(&self, css: &str) -> Value {
        let v = self.session("POST", "/element", Some(json!({"using": "css selector", "value": css})));
        v[ELEMENT].clone()
    }

    /// Moves the mouse onto the element `css` names (a real hover).
    fn hover(&self, css: &str) {
        self.on_element(css, |el| {
            let origin = json!({ ELEMENT: el });
            let actions = json!({"actions": [{"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
                "actions": [{"type": "pointerMove", "duration": 0, "origin": origin, "x": 0, "y": 0}]}]});
            ("/actions".to_owned(), actions)
        });
    }

    /// Clicks the element `css` names.
    fn click(&self, css: &str) {
        self.on_element(css, |el| (format!("/element/{}/click", el.as_str().expect("an element id")), json!({})));
    }

    fn screenshot(&self, to: &std::path::Path) {
        let b64 = self.session("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD.decode(b64.as_str().unwrap()).expect("a base64 PNG");
        std::fs::write(to, png).expect("write the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = web::request(self.addr, "DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Chromium and chromedriver, or `None` after saying why the test is skipped.
fn chromium() -> Option<(PathBuf, PathBuf)> {
    let (Some(chromium), Some(chromedriver)) = (
        find("P2PMP_CHROMIUM", &["chromium", "chromium-browser", "google-chrome"]),
        find("P2PMP_CHROMEDRIVER", &["chromedriver"]),
    ) else {
        let why = "Chromium or chromedriver is missing (apt-get install chromium chromium-driver)";
        assert!(std::env::var("P2PMP_REQUIRE_CHROMIUM").as_deref() != Ok("1"), "P2PMP_REQUIRE_CHROMIUM=1: {why}");
        eprintln!("skipped: {why}");
        return None;
    };
    Some((chromium, chromedriver))
}

/// Where a screenshot named `name` is kept: `target/name`.
fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).parent().expect("target/tmp is in target").join(name)
}

#[test]
fn a_browser_sees_the_nodes_and_a_job_run_and_finish_without_a_reload() {
    let Some((chromium, chromedriver)) = chromium() else { return };
    let net = web::network(4);
    let page = net.http_addr().expect("the page is on");
    let browser = Browser::start(&chromium, &chromedriver);
    browser.session("POST", "/url", Some(json!({"url": format!("http://{page}/")})));
    // A mark in the page's window: a reload would wipe it.
    browser.script("window.p2pmpMark = 'still here'; return true;");
    let seen = web::until(Duration::from_secs(20), "four nodes on the page", || {
        let v = browser.script(
            "return [document.querySelectorAll('#nodes tbody tr').length, document.querySelectorAll('#ring circle.node').length];",
        );
        (v == json!([4, 4])).then_some(v)
    });
    assert_eq!(seen, json!([4, 4]));
    let addrs =
        browser.script("return [...document.querySelectorAll('#nodes tbody tr')].map(r => r.dataset.addr).sort();");
    let mut want: Vec<String> = net.overlay_addrs().iter().map(|a| a.to_string()).collect();
    want.sort();
    assert_eq!(addrs, json!(want));
    // A job submitted now: it appears, runs, and finishes, on the same page.
    let dir = std::env::temp_dir().join(format!("p2pmp-browser-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = "echo computing on rank $P2PMP_RANK of $P2PMP_SIZE; sleep 3; echo rank $P2PMP_RANK done";
    let desc = JobDescription::run("/bin/sh", vec!["-c".into(), script.into()], 4);
    let job = web::submit(net.control(), &desc, &dir).to_string();
    let phase_of =
        format!("const j = document.querySelector('[data-job=\"{job}\"]'); return j ? j.dataset.phase : null;");
    let mut phases: Vec<String> = Vec::new();
    web::until(Duration::from_secs(40), "the job to finish on the page", || {
        let p = browser.script(&phase_of).as_str().map(str::to_owned);
        if let Some(p) = &p {
            if phases.last() != Some(p) {
                phases.push(p.clone());
            }
        }
        (p.as_deref() == Some("done")).then_some(())
    });
    assert!(phases.iter().any(|p| p == "running"), "the page showed it running: {phases:?}");
    assert_eq!(browser.script("return window.p2pmpMark;"), json!("still here"), "the page was not reloaded");
    // Its details: where each rank ran, and the last lines of its output.
    let summary = format!("[data-job=\"{job}\"] > summary");
    browser.click(&summary);
    let text = web::until(Duration::from_secs(5), "the job's output on the page", || {
        let t = browser.script(&format!("return document.querySelector('[data-job=\"{job}\"]').innerText;"));
        t.as_str().filter(|t| t.contains("rank 3 done")).map(str::to_owned)
    });
    for rank in 0..4 {
        assert!(text.contains(&format!("computing on rank {rank} of 4")), "{text}");
    }
    assert!(net.overlay_addrs().iter().any(|a| text.contains(&a.to_string())), "where ranks ran: {text}");
    // Pointing at the page's own node shows its neighbours, as it reports them.
    let me = net.overlay_addrs()[0];
    // It is on top where it sits, even with a neighbour close by on the ring
    // (the pointer lands on its centre).
    let on_top = browser.script(&format!(
        "const e = document.querySelector('#ring circle[data-addr=\"{me}\"]'); e.scrollIntoView({{block: 'center'}});\
         const c = e.getBoundingClientRect(); const at = document.elementFromPoint(c.x + c.width / 2, c.y + c.height / 2);\
         return at && at.dataset ? at.dataset.addr : null;"
    ));
    assert_eq!(on_top, json!(me.to_string()), "the page's own node is drawn over its neighbours");
    // Until the node's own report arrives the page shows neighbours computed
    // from the node list: wait for the report rather than race it (it is
    // asked for every second). This wait ran out twice in CI, at 5 s and at
    // 15 s: most likely a neighbour close by on the ring, drawn over the node,
    // took the pointer, and the page showed that neighbour's computed links.
    let info = web::until(Duration::from_secs(15), "the node's own neighbours on the page", || {
        browser.hover(&format!("#ring circle[data-addr=\"{me}\"]"));
        let t = browser.script("return document.getElementById('ring-info').innerText;");
        t.as_str().filter(|t| t.contains("as the node itself reports them")).map(str::to_owned)
    });
    assert!(info.contains("successors"), "{info}");
    let lines = browser.script("return document.querySelectorAll('#ring .succ').length;");
    assert_eq!(lines, json!(3), "a line to each of its three successors");
    assert_eq!(
        browser.script("return document.getElementById('zones-panel').hidden;"),
        json!(true),
        "no zones on Chord"
    );
    let shot = screenshot_path("status-page.png");
    browser.screenshot(&shot);
    assert!(std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0) > 10_000, "a real screenshot");
    eprintln!("screenshot: {}", shot.display());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_browser_sees_the_can_zones_as_boxes_and_a_zones_neighbours() {
    let Some((chromium, chromedriver)) = chromium() else { return };
    let net = web::network_over(4, Some(2));
    let page = net.http_addr().expect("the page is on");
    let mut want: Vec<String> = net.overlay_addrs().iter().map(|a| a.to_string()).collect();
    want.sort();
    // What the API says each node owns and neighbours, once the zones tile the space.
    let api = web::until(Duration::from_secs(30), "the zones of four nodes", || {
        let v = web::get(page, "/api/zones").json();
        web::zones_settled(&v, 4).then_some(v)
    });
    let browser = Browser::start(&chromium, &chromedriver);
    browser.session("POST", "/url", Some(json!({"url": format!("http://{page}/")})));
    // One box per zone, every node's, in the zones panel; the ring panel is hidden.
    let zones: usize = api["nodes"].as_array().unwrap().iter().map(|n| n["zones"].as_array().unwrap().len()).sum();
    let owners = web::until(Duration::from_secs(20), "the zones drawn", || {
        let v = browser.script(
            "if (document.getElementById('zones-panel').hidden) return null;
             const r = [...document.querySelectorAll('#zones rect.zone')];
             return [r.length, [...new Set(r.map(e => e.dataset.addr))].sort()];",
        );
        (v[0].as_u64() == Some(zones as u64) && v[1].as_array().is_some_and(|a| a.len() == 4)).then_some(v[1].clone())
    });
    assert_eq!(owners, json!(want), "a box for every node");
    assert_eq!(browser.script("return document.getElementById('ring-panel').hidden;"), json!(true));
    // Boxes fill the square: their areas sum to its area (no gap, no overlap).
    let area = browser.script(
        "const s = document.querySelector('#zones rect.frame');
         const a = [...document.querySelectorAll('#zones rect.zone')].reduce((t, r) => t + r.width.baseVal.value * r.height.baseVal.value, 0);
         return a / (s.width.baseVal.value * s.height.baseVal.value);",
    );
    assert!((area.as_f64().unwrap() - 1.0).abs() < 1e-6, "{area}");
    // Pointing at the page's own node's zone shows its neighbours' zones.
    let me = net.overlay_addrs()[0].to_string();
    let mine = api["nodes"].as_array().unwrap().iter().find(|n| n["addr"] == me.as_str()).unwrap().clone();
    browser.hover(&format!("#zones rect.zone[data-addr=\"{me}\"]"));
    let info = browser.script("return document.getElementById('zones-info').innerText;");
    let info = info.as_str().unwrap_or_default();
    assert!(info.contains(&me) && info.contains("neighbours"), "{info}");
    for n in mine["neighbours"].as_array().unwrap() {
        assert!(info.contains(n.as_str().unwrap()), "{n} in {info}");
    }
    let lit = browser.script(
        "return [...new Set([...document.querySelectorAll('#zones rect.nbr')].map(e => e.dataset.addr))].sort();",
    );
    let mut nbrs: Vec<&str> = mine["neighbours"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    nbrs.sort();
    assert_eq!(lit, json!(nbrs), "the neighbours' zones are lit");
    let shot = screenshot_path("status-page-can.png");
    browser.screenshot(&shot);
    assert!(std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0) > 10_000, "a real screenshot");
    eprintln!("screenshot: {}", shot.display());
}
