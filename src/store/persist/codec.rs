//! One counter record in bytes: LEB128 varints throughout, so a typical record is the counter's
//! 16-byte fingerprint plus a dozen bytes.
//!
//! ```text
//! record  = (algorithm | 0x80):u8 fingerprint:16 bytes idle_at:varint state
//!         | algorithm:u8 key_len:varint key idle_at:varint state      (written before 0.2)
//! state   = fixed:   window_start count
//!         | sliding: window_start previous current
//!         | bucket:  tat_scaled (u128)
//!         | log:     n entry{n}      entry = at_delta hits   (at: delta from the previous entry)
//! ```
//! A sliding-log record may carry only the entries added since the counter's previous record;
//! restore combines them (see `store::saved`).

use std::collections::VecDeque;

use crate::algorithm::{Algorithm, LogEntry, State};
use crate::store::saved::{CounterView, SavedCounter, SavedKey};
use crate::store::{CounterKey, Fingerprint};

/// Set in the algorithm byte of a record that names its counter by fingerprint.
const FINGERPRINTED: u8 = 0x80;

/// The longest key accepted from disk (a request key is far smaller: 64 KiB of entries).
const MAX_KEY: u64 = 1 << 20;
/// The most log entries accepted in one record.
const MAX_ENTRIES: u64 = 1 << 24;

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes ended inside a record.
    #[error("record cut short")]
    Short,
    /// A field holds a value no writer produces.
    #[error("bad record: {0}")]
    Bad(&'static str),
}

/// Appends the record of `view` to `out`.
pub fn encode(view: CounterView<'_>, out: &mut Vec<u8>) {
    let algorithm = match view.state {
        State::Fixed { .. } => Algorithm::FixedWindow,
        State::Sliding { .. } => Algorithm::SlidingWindow,
        State::Log { .. } => Algorithm::SlidingLog,
        State::Bucket { .. } => Algorithm::TokenBucket,
    };
    out.push(algorithm as u8 | FINGERPRINTED);
    out.extend_from_slice(&view.fingerprint.to_bytes());
    put(out, u128::from(view.idle_at));
    match view.state {
        State::Fixed {
            window_start,
            count,
        } => {
            put(out, u128::from(*window_start));
            put(out, u128::from(*count));
        }
        State::Sliding {
            window_start,
            previous,
            current,
        } => {
            put(out, u128::from(*window_start));
            put(out, u128::from(*previous));
            put(out, u128::from(*current));
        }
        State::Bucket { tat_scaled } => put(out, *tat_scaled),
        State::Log { entries, .. } => {
            // At least the newest entry: a record always says where the log's window is.
            let from = entries
                .partition_point(|e| e.at < view.log_from)
                .min(entries.len().saturating_sub(1));
            put(out, (entries.len() - from) as u128);
            let mut previous = 0;
            for e in entries.range(from..) {
                put(out, u128::from(e.at - previous));
                put(out, u128::from(e.hits));
                previous = e.at;
            }
        }
    }
}

/// Reads one record from the front of `input`, advancing it.
pub fn decode(input: &mut &[u8]) -> Result<SavedCounter, DecodeError> {
    let (&tag, rest) = input.split_first().ok_or(DecodeError::Short)?;
    *input = rest;
    let key = if tag & FINGERPRINTED != 0 {
        let (bytes, rest) = input.split_first_chunk::<16>().ok_or(DecodeError::Short)?;
        *input = rest;
        SavedKey::Fingerprint(
            Fingerprint::from_bytes(*bytes).ok_or(DecodeError::Bad("zero fingerprint"))?,
        )
    } else {
        let key_len = get_u64(input)?;
        if key_len > MAX_KEY || key_len > input.len() as u64 {
            return Err(DecodeError::Bad("key length"));
        }
        let (key, rest) = input.split_at(key_len as usize);
        *input = rest;
        SavedKey::Bytes(CounterKey::from_bytes(key))
    };
    let tag = tag & !FINGERPRINTED;
    let idle_at = get_u64(input)?;
    let state = match tag {
        0 => State::Fixed {
            window_start: get_u64(input)?,
            count: get_u64(input)?,
        },
        1 => State::Sliding {
            window_start: get_u64(input)?,
            previous: get_u64(input)?,
            current: get_u64(input)?,
        },
        2 => {
            let n = get_u64(input)?;
            if n == 0 || n > MAX_ENTRIES {
                return Err(DecodeError::Bad("log entry count"));
            }
            let mut entries = VecDeque::with_capacity(n.min(1024) as usize);
            let (mut at, mut total) = (0u64, 0u64);
            for _ in 0..n {
                at = at
                    .checked_add(get_u64(input)?)
                    .ok_or(DecodeError::Bad("log time"))?;
                let hits = get_u64(input)?;
                total = total.saturating_add(hits);
                entries.push_back(LogEntry { at, hits });
            }
            State::Log { entries, total }
        }
        3 => State::Bucket {
            tat_scaled: get(input)?,
        },
        _ => return Err(DecodeError::Bad("algorithm")),
    };
    Ok(SavedCounter {
        key,
        state,
        idle_at,
    })
}

/// Appends `value` as an LEB128 varint.
fn put(out: &mut Vec<u8>, mut value: u128) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads an LEB128 varint of at most 128 bits.
fn get(input: &mut &[u8]) -> Result<u128, DecodeError> {
    let mut value = 0u128;
    for (i, &byte) in input.iter().enumerate() {
        let shift = 7 * i as u32;
        if shift >= 128 || (shift == 126 && byte > 0b11) {
            return Err(DecodeError::Bad("varint overflow"));
        }
        value |= u128::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            *input = &input[i + 1..];
            return Ok(value);
        }
    }
    Err(DecodeError::Short)
}

/// Reads a varint that must fit 64 bits.
fn get_u64(input: &mut &[u8]) -> Result<u64, DecodeError> {
    u64::try_from(get(input)?).map_err(|_| DecodeError::Bad("value over 64 bits"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::store::{CounterKeyBuilder, Fingerprinter};

    fn key() -> CounterKey {
        let mut b = CounterKeyBuilder::new("edge");
        b.entry("api_key", "k1");
        b.finish(0, Algorithm::SlidingWindow, 60)
    }

    fn fingerprint() -> Fingerprint {
        Fingerprinter::new([3; 16]).of(key().as_bytes())
    }

    fn round_trip(state: State, log_from: u64) -> SavedCounter {
        let mut bytes = Vec::new();
        let view = CounterView {
            fingerprint: fingerprint(),
            state: &state,
            idle_at: 123_456_789,
            log_from,
        };
        encode(view, &mut bytes);
        let mut input = &bytes[..];
        let saved = decode(&mut input).expect("decodes");
        assert!(input.is_empty());
        saved
    }

    /// Every state comes back exactly, with its fingerprint and idle time.
    #[test]
    fn records_round_trip() {
        let log = State::Log {
            entries: [(5, 1), (9, 2), (1 << 62, 3)]
                .into_iter()
                .map(|(at, hits)| LogEntry { at, hits })
                .collect(),
            total: 6,
        };
        for state in [
            State::Fixed {
                window_start: u64::MAX,
                count: 0,
            },
            State::Sliding {
                window_start: 60,
                previous: 1,
                current: u64::MAX,
            },
            State::Bucket {
                tat_scaled: u128::MAX,
            },
            log.clone(),
        ] {
            let saved = round_trip(state.clone(), 0);
            assert_eq!(
                (saved.key, saved.state, saved.idle_at),
                (SavedKey::Fingerprint(fingerprint()), state, 123_456_789)
            );
        }
    }

    /// A log record written from a mark carries only the entries at or after it.
    #[test]
    fn log_record_from_mark() {
        let log = State::Log {
            entries: [(5, 1), (9, 2), (12, 3)]
                .into_iter()
                .map(|(at, hits)| LogEntry { at, hits })
                .collect(),
            total: 6,
        };
        let saved = round_trip(log, 9);
        let State::Log { entries, total } = saved.state else {
            panic!("a log")
        };
        assert_eq!(entries.iter().map(|e| e.at).collect::<Vec<_>>(), [9, 12]);
        assert_eq!(total, 5);
    }

    /// Truncated or garbled bytes are errors, never panics.
    #[test]
    fn bad_bytes_are_errors() {
        let state = State::Fixed {
            window_start: 60,
            count: 3,
        };
        let mut bytes = Vec::new();
        encode(
            CounterView {
                fingerprint: fingerprint(),
                state: &state,
                idle_at: 1,
                log_from: 0,
            },
            &mut bytes,
        );
        for cut in 0..bytes.len() {
            assert!(decode(&mut &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = bytes.clone();
        bad[0] = 9 | FINGERPRINTED;
        assert_eq!(decode(&mut &bad[..]), Err(DecodeError::Bad("algorithm")));
        assert!(
            decode(
                &mut &[
                    0u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f
                ][..]
            )
            .is_err()
        );
        let mut zero = vec![FINGERPRINTED];
        zero.extend_from_slice(&[0; 16]);
        zero.extend_from_slice(&[1, 1, 1]);
        assert_eq!(
            decode(&mut &zero[..]),
            Err(DecodeError::Bad("zero fingerprint"))
        );
    }

    /// A record of the earlier format, which named the counter by its key bytes, still reads.
    #[test]
    fn records_with_key_bytes_still_read() {
        let key = key();
        let mut bytes = vec![Algorithm::FixedWindow as u8];
        put(&mut bytes, key.as_bytes().len() as u128);
        bytes.extend_from_slice(key.as_bytes());
        for v in [500, 60, 3] {
            put(&mut bytes, v); // idle_at, window_start, count
        }
        let saved = decode(&mut &bytes[..]).expect("decodes");
        assert_eq!(saved.key, SavedKey::Bytes(key));
        assert_eq!(
            saved.state,
            State::Fixed {
                window_start: 60,
                count: 3
            }
        );
    }
}
