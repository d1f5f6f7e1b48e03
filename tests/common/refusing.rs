//! Loopback ports held with nothing listening: a connect to one is refused, and while it is held
//! no other socket of the test run can be given it. Shared by the proxy tests (through `common`)
//! and the traffic tests.

use std::net::SocketAddr;

/// A socket on `addr` with `SO_REUSEPORT`, so that a listener and a held port can overlap while
/// one hands the port to the other (a port chosen by the kernel, `:0`, is never shared).
pub fn shareable(addr: SocketAddr) -> socket2::Socket {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_reuse_port(true).expect("SO_REUSEPORT");
    socket.set_nonblocking(true).expect("non-blocking");
    socket.bind(&addr.into()).expect("bind");
    socket
}

/// A loopback port bound with nothing listening: a connection to it is refused, and while this
/// lives the kernel gives the port to no other socket. An address merely left unbound would be,
/// in a run of tests that each start servers on `:0`, someone else's live server sooner or later.
pub struct RefusingPort {
    pub addr: SocketAddr,
    _socket: socket2::Socket,
}

impl RefusingPort {
    pub fn new() -> RefusingPort {
        RefusingPort::hold("127.0.0.1:0".parse().expect("address"))
    }

    pub fn hold(addr: SocketAddr) -> RefusingPort {
        let socket = shareable(addr);
        let addr = socket
            .local_addr()
            .expect("local address")
            .as_socket()
            .expect("an inet address");
        RefusingPort {
            addr,
            _socket: socket,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}
