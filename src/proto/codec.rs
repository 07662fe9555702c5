//! The gRPC codec of the generated services: prost's, except that a message that does not
//! decode is `INVALID_ARGUMENT` (the caller sent it), where tonic answers `INTERNAL`.
//!
//! Envoy and the README promise `INVALID_ARGUMENT` for malformed calls; `INTERNAL` would
//! read as a fault of the server (and `build.rs` points the generated code here).

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, DecodeBuf};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// prost's codec with undecodable messages answered as `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct Codec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Self(ProstCodec::new())
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = Decoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        Decoder(self.0.decoder())
    }
}

/// prost's decoder; its only failure, a message that does not decode, is the caller's.
#[derive(Debug, Clone, Default)]
pub struct Decoder<U>(ProstDecoder<U>);

impl<U: Message + Default> tonic::codec::Decoder for Decoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            Status::invalid_argument(format!("undecodable request: {}", status.message()))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
