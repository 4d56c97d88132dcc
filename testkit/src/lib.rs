//! What berth's tests and benchmarks share and the `berth` that operators run must not link:
//! dependencies of one's own to take away and give back and a certificate authority
//! ([`scratch`], for the fault-injection and TLS tests, `berth bench recovery` and `berth bench
//! tls`), and Backend.AI's official client installed for the test and the bench that drive
//! berth with it ([`backendai_client`]). `berth/tests`, `tests/e2e` and `berth-bench` depend
//! on it; `berth` itself does not, so rcgen is not built into the product.

pub mod backendai_client;
pub mod scratch;
