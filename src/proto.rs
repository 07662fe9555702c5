//! Generated types: Envoy's RLS v3 service, its quota service (RLQS), the xDS aggregated discovery service and
//! envoyproxy/ratelimit's `RateLimitConfig` resource; the only module that allows lints for
//! generated code.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

pub mod codec;

/// `envoy.*` packages.
pub mod envoy {
    /// `envoy.service.*`
    pub mod service {
        /// `envoy.service.ratelimit.*`
        pub mod ratelimit {
            /// `envoy.service.ratelimit.v3`: the service, its request and response.
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
                include!(concat!(
                    env!("OUT_DIR"),
                    "/envoy.service.ratelimit.v3.serde.rs"
                ));
            }
        }
        /// `envoy.service.rate_limit_quota.*`
        pub mod rate_limit_quota {
            /// `envoy.service.rate_limit_quota.v3`: the quota service (RLQS), in Envoy 1.40's shape.
            pub mod v3 {
                tonic::include_proto!("envoy.service.rate_limit_quota.v3");
            }
        }
        /// `envoy.service.discovery.*`
        pub mod discovery {
            /// `envoy.service.discovery.v3`: the aggregated discovery service (state of the world).
            pub mod v3 {
                tonic::include_proto!("envoy.service.discovery.v3");
            }
        }
    }
    /// `envoy.extensions.*`
    pub mod extensions {
        /// `envoy.extensions.common.*`
        pub mod common {
            /// `envoy.extensions.common.ratelimit.*`
            pub mod ratelimit {
                /// `envoy.extensions.common.ratelimit.v3`: the request descriptor.
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                    include!(concat!(
                        env!("OUT_DIR"),
                        "/envoy.extensions.common.ratelimit.v3.serde.rs"
                    ));
                }
            }
        }
    }
    /// `envoy.type.*`
    pub mod r#type {
        /// `envoy.type.v3`: the override unit, and the quota service's strategies.
        pub mod v3 {
            include!(concat!(env!("OUT_DIR"), "/envoy.r#type.v3.rs"));
            include!(concat!(env!("OUT_DIR"), "/envoy.r#type.v3.serde.rs"));
        }
    }
    /// `envoy.config.*`
    pub mod config {
        /// `envoy.config.core.*`
        pub mod core {
            /// `envoy.config.core.v3`: header values and the xDS node.
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
                include!(concat!(env!("OUT_DIR"), "/envoy.config.core.v3.serde.rs"));
            }
        }
    }
}

/// `ratelimit.*`: envoyproxy/ratelimit's own packages.
pub mod ratelimit {
    /// `ratelimit.config.*`
    pub mod config {
        /// `ratelimit.config.ratelimit.*`
        pub mod ratelimit {
            /// `ratelimit.config.ratelimit.v3`: the rule resource served over xDS.
            pub mod v3 {
                tonic::include_proto!("ratelimit.config.ratelimit.v3");
            }
        }
    }
}

/// `google.rpc`: the status carried by an xDS NACK.
pub mod google {
    /// `google.rpc`
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

pub use envoy::extensions::common::ratelimit::v3::{RateLimitDescriptor, rate_limit_descriptor};
pub use envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse, rate_limit_response, rate_limit_service_client,
    rate_limit_service_server,
};

/// Google's well-known types as the generated code uses them (with protojson support).
pub use pbjson_types as well_known;
