//! DH-HMAC-CHAP cost per queue: one whole transaction (Negotiate, Challenge, Reply,
//! Success1, Success2), host and controller state machines in one thread, for each DH
//! group with SHA-512, bidirectional. The DH work (two exponentiations per side) is
//! what a connecting queue pays; the transport round trips come on top.
//!
//!     cargo bench -p nvmf-tests --bench auth          # BENCH_ROUNDS (20)
//!
//! Prints the median and minimum time per transaction for each group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::auth::{
    AuthPolicy, ControllerAuth, DhGroup, DhchapSecret, HashId, HostAuth, HostKeys,
};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:bench";
const SUB: &str = "nqn.2024-01.io.nvmf-rs:bench";

fn once(p: &Arc<AuthPolicy>, k: &HostKeys) -> Duration {
    let start = Instant::now();
    let mut c = ControllerAuth::new(HOST, SUB);
    let mut h = HostAuth::new(k.clone(), HOST, SUB, 1);
    c.on_send(&h.negotiate(), Some(p.clone()));
    let Ok((ch, _)) = c.on_receive(4096) else {
        panic!("challenge")
    };
    let reply = h.on_challenge(&ch).unwrap_or_else(|e| panic!("{e}"));
    c.on_send(&reply, Some(p.clone()));
    let Ok((s1, _)) = c.on_receive(4096) else {
        panic!("success1")
    };
    if let Some(s2) = h.on_success1(&s1).unwrap_or_else(|e| panic!("{e}")) {
        c.on_send(&s2, Some(p.clone()));
    }
    assert!(c.is_authenticated());
    start.elapsed()
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let hk = DhchapSecret::generate(Some(HashId::Sha512), 64).unwrap_or_else(|e| panic!("{e}"));
    let ck = DhchapSecret::generate(Some(HashId::Sha512), 64).unwrap_or_else(|e| panic!("{e}"));
    println!("DH-HMAC-CHAP transaction (SHA-512, bidirectional), {rounds} rounds");
    println!("{:<10} {:>12} {:>12}", "group", "median", "min");
    for g in DhGroup::ALL {
        let p = Arc::new(AuthPolicy {
            host_key: hk.clone(),
            ctrl_key: Some(ck.clone()),
            hashes: vec![HashId::Sha512],
            groups: vec![g],
        });
        let k = HostKeys {
            host_key: hk.clone(),
            ctrl_key: Some(ck.clone()),
        };
        once(&p, &k); // warm the group's parameters
        let mut t: Vec<Duration> = (0..rounds).map(|_| once(&p, &k)).collect();
        t.sort();
        println!(
            "{:<10} {:>10.2}ms {:>10.2}ms",
            g.name(),
            t[t.len() / 2].as_secs_f64() * 1e3,
            t[0].as_secs_f64() * 1e3
        );
    }
}
