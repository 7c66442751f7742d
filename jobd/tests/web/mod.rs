//! Plain HTTP/1.1 over std for the status page tests: requests to the page and
//! to chromedriver (both on loopback), and reading server-sent events.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A response: status code and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn open(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> std::io::Result<BufReader<TcpStream>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    Ok(BufReader::new(s))
}

/// Status line and headers (names lowercased).
fn head(r: &mut BufReader<TcpStream>) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            return Ok((status, headers));
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
}

fn chunked(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
}

/// The next chunk of a chunked body (`None` at its end).
fn next_chunk(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let len = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
        .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
    let mut data = vec![0; len + 2];
    r.read_exact(&mut data)?;
    data.truncate(len);
    Ok((len > 0).then_some(data))
}

/// One request; the whole response.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> std::io::Result<Response> {
    let mut r = open(addr, method, path, body)?;
    let (status, headers) = head(&mut r)?;
    let mut bytes = Vec::new();
    let length = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse::<usize>().ok());
    if chunked(&headers) {
        while let Some(c) = next_chunk(&mut r)? {
            bytes.extend(c);
        }
    } else if let Some(len) = length {
        // chromedriver keeps the connection open whatever the request said.
        bytes.resize(len, 0);
        r.read_exact(&mut bytes)?;
    } else {
        r.read_to_end(&mut bytes)?;
    }
    Ok(Response { status, body: String::from_utf8_lossy(&bytes).into_owned() })
}

pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, None).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Reads server-sent events from `path` until `done` says enough or `limit`
/// passes; returns every (event name, data) read.
pub fn events(
    addr: SocketAddr,
    path: &str,
    limit: Duration,
    mut done: impl FnMut(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let mut r = open(addr, "GET", path, None).expect("open the event stream");
    let (status, headers) = head(&mut r).expect("event stream headers");
    assert_eq!(status, 200);
    assert!(headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream")), "{headers:?}");
    let deadline = Instant::now() + limit;
    let mut text = String::new();
    let mut got = Vec::new();
    while Instant::now() < deadline && !done(&got) {
        let _ = r
            .get_ref()
            .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))));
        let chunk = if chunked(&headers) { next_chunk(&mut r) } else { read_some(&mut r) };
        match chunk {
            Ok(Some(c)) => text.push_str(&String::from_utf8_lossy(&c)),
            _ => break,
        }
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let mut name = "message".to_owned();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            if !data.is_empty() {
                got.push((name, data));
            }
        }
    }
    got
}

fn read_some(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0; 16 * 1024];
    let n = r.read(&mut buf)?;
    buf.truncate(n);
    Ok((n > 0).then_some(buf))
}

/// Polls `f` until it returns `Some`, for at most `limit`
/// ([`p2pmp_tests::wait_until`]).
pub fn until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    p2pmp_tests::wait_until(what, limit, || f().ok_or_else(|| "not yet".to_owned()))
}

/// `n` local daemons, the first serving the status page on a free loopback
/// port; returns once the overlay lists every node.
pub fn network(n: usize) -> p2pmp_jobd::embedded::EmbeddedNet {
    network_over(n, None)
}

/// [`network`] over CAN in `dims` dimensions when given, else over Chord.
pub fn network_over(n: usize, can_dims: Option<u8>) -> p2pmp_jobd::embedded::EmbeddedNet {
    let net = p2pmp_jobd::embedded::EmbeddedNet::start_with(n, 2, |c| {
        if c.bootstrap.is_empty() {
            c.http = Some("127.0.0.1:0".into());
        }
        if let Some(d) = can_dims {
            c.overlay = p2pmp_jobd::Overlay::Can;
            c.dims = d;
        }
    })
    .expect("start the network");
    assert!(net.wait_formed(Duration::from_secs(30), |_| {}), "the overlay did not form");
    net
}

/// Submits `desc` (relative paths from `base`) to the daemon at `control`.
pub fn submit(
    control: SocketAddr,
    desc: &p2pmp_core::job::JobDescription,
    base: &std::path::Path,
) -> p2pmp_core::job::JobId {
    use p2pmp_core::node::control::{ToolReply, ToolRequest};
    let mut c = p2pmp_jobd::Client::connect(control).expect("connect to the daemon");
    let req =
        ToolRequest::Submit { nonce: 7, xml: desc.to_xml(), base_dir: base.to_string_lossy().into(), watch: false };
    match c.call(req, Duration::from_secs(10)).expect("submit") {
        ToolReply::Submitted { job, .. } => job,
        other => panic!("submit answered {other:?}"),
    }
}

/// Whether a `/api/zones` document shows `n` nodes whose zones fill the space
/// and whose neighbours are mutual (a settled CAN: right after joins a node
/// may know a neighbour that does not know it yet).
pub fn zones_settled(v: &serde_json::Value, n: usize) -> bool {
    let Some(nodes) = v["nodes"].as_array() else { return false };
    let total: f64 = nodes.iter().filter_map(|z| z["volume"].as_f64()).sum();
    let mutual = nodes.iter().all(|z| {
        z["neighbours"].as_array().is_some_and(|ns| {
            !ns.is_empty()
                && ns.iter().all(|o| {
                    nodes
                        .iter()
                        .any(|y| y["addr"] == *o && y["neighbours"].as_array().is_some_and(|b| b.contains(&z["addr"])))
                })
        })
    });
    nodes.len() == n && (total - 1.0).abs() < 1e-9 && mutual
}
