//! One run of the script on a pooled connection: the batched calls' keys and arguments
//! packed into one `EVALSHA` (an `EVAL` when Redis does not hold the script yet), and the
//! reply split back into each call's answers.

use std::collections::HashMap;
use std::sync::Arc;

use redis::{ErrorKind, ServerErrorKind, Value};
use smallvec::SmallVec;

use super::conn::{self, Attempt, Generation, Pool, RedisConn};
use super::script::{self, Answered, ChargeFields};
use crate::store::StoreError;

/// One call, encoded for the script (inline for calls of up to two charges: no heap blocks).
pub struct Job {
    /// The call's distinct Redis keys.
    pub keys: SmallVec<[Vec<u8>; 2]>,
    /// Its charges; key indices are 1-based into `keys`.
    pub charges: SmallVec<[ChargeFields; 2]>,
    /// Each charge's cost (to report what was available when admitted).
    pub costs: SmallVec<[u64; 2]>,
    /// The call's time in microseconds; `None` for Redis's clock.
    pub now_us: Option<u64>,
}

/// Sends `cmd` on a pooled connection. A connection found dead before the command left it
/// (it broke while Redis was away) drops its generation and the command goes to a live
/// connection, or a new one: a connection that broke earlier never fails a call.
async fn send(
    pool: &Arc<Pool>,
    cmd: &redis::Cmd,
) -> Result<(Generation, RedisConn, redis::RedisResult<Value>), StoreError> {
    let mut tries = pool.size() + 1;
    loop {
        let (generation, mut conn) = pool.get().await?;
        match conn.try_query(cmd).await {
            Attempt::Answered(reply) => return Ok((generation, conn, reply)),
            Attempt::Unsent(e) => {
                pool.discard(generation);
                tries -= 1;
                if tries == 0 {
                    return Err(e.into());
                }
            }
        }
    }
}

/// Sends one plain command (an admin reset's `DEL`) on a pooled connection, as a script run
/// is sent: a connection found dead first is replaced, one lost on the way is dropped.
pub async fn run_command(pool: &Arc<Pool>, cmd: &redis::Cmd) -> Result<Value, StoreError> {
    let (generation, _conn, reply) = send(pool, cmd).await?;
    reply
        .inspect_err(|e| {
            if conn::is_lost(e) {
                pool.discard(generation);
            }
        })
        .map_err(StoreError::from)
}

/// How many times a script refused by a cluster master that a failover demoted is sent
/// again (after the first, the demoted node redirects it to the new master).
const DEMOTED_RESENDS: usize = 2;

/// Runs a script once: `command(verb, script)` builds its command, sent as `EVALSHA` of `sha`,
/// then as `EVAL` of `source` if Redis does not hold the script (first use on a server, after
/// a restart or `SCRIPT FLUSH`; `EVAL` loads it). A reply that shows the connection lost drops
/// its generation. Every script of the store runs this way.
///
/// On a cluster, a script refused with `READONLY` reached a master a failover demoted (see
/// [`RedisConn::refuse_replica_reads`]): a replica refuses every write, so the script stopped at
/// its first and wrote nothing. That node is told to redirect such commands and the script is sent
/// again: it meets `MOVED` and runs on the new master, within the call's deadline as ever.
pub async fn run_script(
    pool: &Arc<Pool>,
    sha: &str,
    source: &str,
    command: impl Fn(&str, &str) -> redis::Cmd,
) -> Result<Value, StoreError> {
    let (generation, mut conn, mut reply) = send(pool, &command("EVALSHA", sha)).await?;
    let mut resends = if pool.is_cluster() {
        DEMOTED_RESENDS
    } else {
        0
    };
    loop {
        reply = match reply {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                conn.query(&command("EVAL", source)).await
            }
            Err(e) if resends > 0 && is_demoted(&e) => {
                resends -= 1;
                let again = command("EVALSHA", sha);
                reply = match conn.refuse_replica_reads(&again).await {
                    Ok(()) => conn.query(&again).await,
                    Err(e) => Err(e),
                };
                continue;
            }
            other => other,
        };
        break;
    }
    reply
        .inspect_err(|e| {
            if conn::is_lost(e) {
                pool.discard(generation);
            }
        })
        .map_err(StoreError::from)
}

/// Whether `error` is a write refused by a replica (a master demoted by a failover).
fn is_demoted(error: &redis::RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// Runs the script once for `jobs`, in order; returns each job's outcomes.
pub async fn execute(
    pool: &Arc<Pool>,
    sha: &str,
    jobs: &[Job],
) -> Result<Vec<Vec<Answered>>, StoreError> {
    // KEYS: the distinct keys of all the jobs. `global[at + i]` is the KEYS index of a job's
    // key i, where `at` is the number of keys of the jobs before it.
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut index: HashMap<&[u8], u64, foldhash::fast::RandomState> = HashMap::default();
    let global: Vec<u64> = jobs
        .iter()
        .flat_map(|job| job.keys.iter())
        .map(|k| {
            // Calls on a hot counter follow each other: the key just added needs no hashing.
            if keys.last() == Some(&k.as_slice()) {
                return keys.len() as u64;
            }
            *index.entry(k.as_slice()).or_insert_with(|| {
                keys.push(k);
                keys.len() as u64
            })
        })
        .collect();
    let command = |verb: &str, script: &str| {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(keys.len());
        for key in &keys {
            cmd.arg(*key);
        }
        // Each call's argument is packed in one reused buffer (the command copies it).
        let mut packed = Vec::new();
        let mut at = 0;
        for job in jobs {
            let remap = &global[at..at + job.keys.len()];
            at += job.keys.len();
            let charges = job.charges.iter().map(|f| {
                let mut f = *f;
                f[0] = remap[f[0] as usize - 1];
                f
            });
            script::pack_call(&mut packed, job.now_us, charges);
            cmd.arg(packed.as_slice());
        }
        cmd
    };
    let reply = run_script(pool, sha, script::SOURCE, command).await?;
    let mut rest = script::reply_bytes(&reply)?;
    jobs.iter()
        .map(|job| {
            let (mine, after) =
                rest.split_at(rest.len().min(job.costs.len() * script::REPLY_BYTES));
            rest = after;
            script::outcomes(mine, &job.costs).map_err(StoreError::from)
        })
        .collect()
}
