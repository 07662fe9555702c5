//! A call's [`Decision`] written straight to protobuf's wire format, as the RLS route sends it.
//!
//! Building the generated `RateLimitResponse` per call (strings copied out of the decision,
//! nested messages allocated) and encoding it (prost measures every nested message twice) cost
//! more instructions than checking the call. [`write`] writes the decision's parts as the same
//! bytes a `RateLimitResponse` of them would decode from: the tests decode its output and
//! compare it with [`super::to_proto`] of the same decision. There is no wire type of its own:
//! the route's codec ([`DecisionCodec`]) encodes the limiter's `Decision` itself.

use bytes::BufMut;
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};

use crate::limiter::{Decision, DescriptorStatus};
use crate::proto::RateLimitRequest;
use crate::proto::codec::Decoder as RequestDecoder;

/// Writes `decision` as a `RateLimitResponse` message body. Its dynamic metadata (rare: only
/// when configured) becomes a `google.protobuf.Struct` here, as it is written.
pub fn write(decision: &Decision, buf: &mut impl Sink) {
    put_uint(buf, 1, super::code(decision.code) as u64);
    for status in &decision.statuses {
        put_key(buf, 2, LEN);
        put_varint(buf, status_len(status) as u64);
        write_status(buf, status);
    }
    for (key, value) in &decision.headers {
        let value_len = value.len();
        put_key(buf, 3, LEN);
        put_varint(buf, (str_len(key) + bytes_len(value_len)) as u64);
        put_str(buf, 1, key);
        if value_len > 0 {
            // Written from its parts: the value never exists as one string.
            put_key(buf, 2, LEN);
            put_varint(buf, value_len as u64);
            value.write(|piece| buf.put_slice(piece));
        }
    }
    if let Some(metadata) = &decision.dynamic_metadata {
        use prost::Message;
        put_key(buf, 6, LEN);
        buf.put_slice(&super::to_struct(metadata).encode_length_delimited_to_vec());
    }
}

/// The codec of the generated RLS route: requests decoded by prost (undecodable ones are
/// `INVALID_ARGUMENT`), decisions written by [`write`].
#[derive(Debug, Clone, Default)]
pub struct DecisionCodec;

impl Codec for DecisionCodec {
    type Encode = Decision;
    type Decode = RateLimitRequest;
    type Encoder = DecisionEncoder;
    type Decoder = RequestDecoder<RateLimitRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        DecisionEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder::default()
    }
}

/// Writes decisions into tonic's frame buffer.
#[derive(Debug, Clone, Default)]
pub struct DecisionEncoder;

impl Encoder for DecisionEncoder {
    type Item = Decision;
    type Error = Status;

    fn encode(&mut self, decision: Decision, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // Written on the stack first, then copied in one go: byte by byte, tonic's buffer
        // checks its room through two layers on every write, which cost more than the writing.
        let mut stack = StackSink::new();
        write(&decision, &mut stack);
        match stack.written() {
            Some(bytes) => dst.put_slice(bytes),
            None => {
                let mut bytes = Vec::new();
                write(&decision, &mut bytes);
                dst.put_slice(&bytes);
            }
        }
        Ok(())
    }
}

/// Where a decision is written: a buffer on the stack on the route, a `Vec` for one too large
/// for it and in tests.
pub trait Sink {
    /// Appends one byte.
    fn put_u8(&mut self, byte: u8);
    /// Appends `bytes`.
    fn put_slice(&mut self, bytes: &[u8]);
}

/// A fixed buffer on the stack that notes when a decision does not fit (then it is written
/// again into a `Vec`): nothing is lost and nothing panics, whatever its size.
struct StackSink {
    bytes: [u8; INLINE_ANSWER],
    len: usize,
    overflowed: bool,
}

impl StackSink {
    fn new() -> Self {
        Self {
            bytes: [0; INLINE_ANSWER],
            len: 0,
            overflowed: false,
        }
    }

    /// The bytes written; `None` if the decision did not fit.
    fn written(&self) -> Option<&[u8]> {
        (!self.overflowed).then(|| &self.bytes[..self.len])
    }
}

impl Sink for StackSink {
    #[inline]
    fn put_u8(&mut self, byte: u8) {
        match self.bytes.get_mut(self.len) {
            Some(slot) => {
                *slot = byte;
                self.len += 1;
            }
            None => self.overflowed = true,
        }
    }

    #[inline]
    fn put_slice(&mut self, bytes: &[u8]) {
        match self.bytes.get_mut(self.len..self.len + bytes.len()) {
            Some(slots) => {
                slots.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.overflowed = true,
        }
    }
}

impl Sink for Vec<u8> {
    fn put_u8(&mut self, byte: u8) {
        self.push(byte);
    }

    fn put_slice(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Decisions up to this size (a few statuses with their headers) are written on the stack.
const INLINE_ANSWER: usize = 256;

/// Wire type of a varint field.
const VARINT: u8 = 0;
/// Wire type of a length-delimited field (strings, messages).
const LEN: u8 = 2;

/// The body of one `DescriptorStatus`.
fn write_status(buf: &mut impl Sink, status: &DescriptorStatus) {
    put_uint(buf, 1, super::code(status.code) as u64);
    if let Some(limit) = &status.limit {
        put_key(buf, 2, LEN);
        put_varint(buf, limit_len(limit) as u64);
        put_uint(buf, 1, u64::from(limit.requests_per_unit));
        put_uint(buf, 2, super::response_unit(limit.unit) as u64);
        put_str(buf, 3, limit.name.as_deref().unwrap_or_default());
    }
    put_uint(buf, 3, u64::from(status.remaining));
    if let Some(reset) = status.reset_after {
        let (seconds, nanos) = duration(reset);
        put_key(buf, 4, LEN);
        put_varint(buf, (uint_len(seconds) + uint_len(nanos)) as u64);
        put_uint(buf, 1, seconds);
        put_uint(buf, 2, nanos);
    }
}

fn status_len(status: &DescriptorStatus) -> usize {
    let limit = status
        .limit
        .as_ref()
        .map_or(0, |limit| nested_len(limit_len(limit)));
    let reset = status.reset_after.map_or(0, |reset| {
        let (seconds, nanos) = duration(reset);
        nested_len(uint_len(seconds) + uint_len(nanos))
    });
    uint_len(super::code(status.code) as u64)
        + limit
        + uint_len(u64::from(status.remaining))
        + reset
}

fn limit_len(limit: &crate::limiter::ReportedLimit) -> usize {
    uint_len(u64::from(limit.requests_per_unit))
        + uint_len(super::response_unit(limit.unit) as u64)
        + str_len(limit.name.as_deref().unwrap_or_default())
}

/// A reset as `google.protobuf.Duration`'s seconds and nanos, both never negative.
fn duration(reset: crate::clock::Nanos) -> (u64, u64) {
    let d = super::duration_ms_up(reset);
    (d.seconds.unsigned_abs(), u64::from(d.nanos.unsigned_abs()))
}

/// A nested message field of `body` bytes: key, length, body.
#[inline]
fn nested_len(body: usize) -> usize {
    1 + varint_len(body as u64) + body
}

/// A varint field: absent when zero, as proto3 writes it.
#[inline]
fn uint_len(value: u64) -> usize {
    if value == 0 { 0 } else { 1 + varint_len(value) }
}

/// A string field: absent when empty.
#[inline]
fn str_len(text: &str) -> usize {
    bytes_len(text.len())
}

/// A length-delimited field of `len` bytes: absent when empty.
#[inline]
fn bytes_len(len: usize) -> usize {
    if len == 0 { 0 } else { nested_len(len) }
}

#[inline]
fn put_uint(buf: &mut impl Sink, tag: u8, value: u64) {
    if value != 0 {
        put_key(buf, tag, VARINT);
        put_varint(buf, value);
    }
}

#[inline]
fn put_str(buf: &mut impl Sink, tag: u8, text: &str) {
    if !text.is_empty() {
        put_key(buf, tag, LEN);
        put_varint(buf, text.len() as u64);
        buf.put_slice(text.as_bytes());
    }
}

/// A field key; every tag here is below 16, so a key is one byte.
#[inline]
fn put_key(buf: &mut impl Sink, tag: u8, wire_type: u8) {
    buf.put_u8(tag << 3 | wire_type);
}

#[inline]
fn put_varint(buf: &mut impl Sink, mut value: u64) {
    while value >= 0x80 {
        buf.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

#[inline]
fn varint_len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

#[cfg(test)]
mod tests;
