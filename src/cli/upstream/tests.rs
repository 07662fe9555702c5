//! Tests of the personality: precedence, warnings, every group.
