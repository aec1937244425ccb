//! A TCP proxy between a node and NATS that a test controls: it can cut
//! the link (every connection closed, new ones refused), heal it, and
//! swallow what the node sends (read and kept, never passed on: what a
//! server killed with its socket full does to the last messages).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Most swallowed bytes kept for [`Proxy::swallowed`] (the newest).
const KEEP_SWALLOWED: usize = 1 << 20;

/// See the module.
pub struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    swallow: Arc<AtomicBool>,
    swallowed: Arc<Mutex<Vec<u8>>>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// A proxy on a loopback port to `127.0.0.1:{to}`.
    pub fn start(to: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let p = Proxy {
            port,
            cut: Arc::default(),
            swallow: Arc::default(),
            swallowed: Arc::default(),
            open: Arc::default(),
        };
        let (cut, swallow, swallowed, open) = (
            p.cut.clone(),
            p.swallow.clone(),
            p.swallowed.clone(),
            p.open.clone(),
        );
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                if cut.load(Ordering::Acquire) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                {
                    let mut held = open.lock().unwrap();
                    held.push(client.try_clone().unwrap());
                    held.push(server.try_clone().unwrap());
                }
                // Node -> NATS: passed on unless swallowing.
                let (mut from, mut into) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (swallow, swallowed) = (swallow.clone(), swallowed.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    loop {
                        let n = match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if swallow.load(Ordering::Acquire) {
                            let mut kept = swallowed.lock().unwrap();
                            kept.extend_from_slice(&buf[..n]);
                            let over = kept.len().saturating_sub(KEEP_SWALLOWED);
                            kept.drain(..over);
                        } else if into.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = into.shutdown(Shutdown::Both);
                });
                // NATS -> node.
                let (mut from, mut into) = (server, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut into);
                    let _ = into.shutdown(Shutdown::Both);
                });
            }
        });
        p
    }

    /// The NATS URL that goes through the proxy.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Closes every connection and refuses new ones until [`heal`].
    ///
    /// [`heal`]: Proxy::heal
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Lets connections through again (passing everything on).
    pub fn heal(&self) {
        self.swallow.store(false, Ordering::Release);
        self.cut.store(false, Ordering::Release);
    }

    /// From now on what the node sends is read and kept, not passed on.
    pub fn swallow(&self) {
        self.swallow.store(true, Ordering::Release);
    }

    /// Whether the swallowed bytes hold `needle`.
    pub fn swallowed(&self, needle: &[u8]) -> bool {
        let kept = self.swallowed.lock().unwrap();
        kept.windows(needle.len()).any(|w| w == needle)
    }
}
