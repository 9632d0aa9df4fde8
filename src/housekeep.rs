//! The `housekeep` timer thread: once a chat has gone quiet, it drops what the chat keeps in
//! memory (its replay ring, its cached context and remembered history tail) and hands the freed
//! heap pages back to the OS (as the WebSocket side does when its last client leaves), and the
//! code pages back to the page cache (`util::code_pages`).

use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::store::cache::ChatCache;
use crate::ws::hub::Hub;

/// Every `every` until `stop` disconnects: drops the replay rings idle past the hub's TTL and
/// the cached chats unused for `idle` that no turn holds.
pub(crate) fn run_loop(hub: &Hub, cache: &ChatCache, idle: Duration, every: Duration, stop: &Receiver<()>) {
    let ticker = crossbeam_channel::tick(every);
    loop {
        crossbeam_channel::select! {
            recv(ticker) -> _ => {
                let rings = hub.prune_idle();
                let chats = cache.expire_idle(idle);
                if rings + chats > 0 {
                    log::debug!("event=housekeep.expired rings={rings} chats={chats}");
                    crate::util::malloc::release_free_memory();
                    crate::util::code_pages::release();
                }
            }
            recv(stop) -> _ => break,
        }
    }
}
