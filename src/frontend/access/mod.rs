//! Who may connect and what they may run: the start-up exchange (`auth`), the users and their
//! password verifiers (`users`, `verifier`), the statements that manage them
//! (`user_statements`) and what a role allows (`privileges`).

pub mod auth;
pub mod privileges;
pub mod user_statements;
pub mod users;
pub mod verifier;
