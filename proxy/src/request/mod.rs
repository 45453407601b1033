//! The request's shared types: the leaf every stage of the request path imports
//! and which imports none of them (see `docs/life-of-a-request.md`).
//!
//! What lives here is what two stages must agree on: the connection's facts
//! ([`conn::ConnInfo`]), the server's [`phase::Phase`], the request body on its
//! way upstream ([`body`]) and its [`progress`], the retry copy of a body
//! ([`tee`]), local replies ([`local_reply`]) and a few header helpers.

pub mod body;
pub mod conn;
pub mod encoded;
pub mod header_case;
pub mod headers;
pub mod local_reply;
pub mod phase;
pub mod progress;
pub mod reason;
pub mod snapshot;
pub mod tee;
pub mod termination;
pub mod view;
pub mod wire;
