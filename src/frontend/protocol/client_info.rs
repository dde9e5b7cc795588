//! Wrappers around a pgwire client (the transaction-block tracker, the authentication
//! wrapper) pass most of `ClientInfo` through unchanged; this macro writes those methods once.

/// The methods of `pgwire::api::ClientInfo` a wrapper around a client passes on to the
/// client in its field `$inner` unchanged (all but the transaction status, which wrappers
/// define themselves).
macro_rules! delegate_client_info {
    ($inner:ident) => {
        fn socket_addr(&self) -> std::net::SocketAddr {
            self.$inner.socket_addr()
        }
        fn is_secure(&self) -> bool {
            self.$inner.is_secure()
        }
        fn protocol_version(&self) -> pgwire::messages::ProtocolVersion {
            self.$inner.protocol_version()
        }
        fn set_protocol_version(&mut self, version: pgwire::messages::ProtocolVersion) {
            self.$inner.set_protocol_version(version)
        }
        fn pid_and_secret_key(&self) -> (i32, pgwire::messages::startup::SecretKey) {
            self.$inner.pid_and_secret_key()
        }
        fn set_pid_and_secret_key(
            &mut self,
            pid: i32,
            secret_key: pgwire::messages::startup::SecretKey,
        ) {
            self.$inner.set_pid_and_secret_key(pid, secret_key)
        }
        fn state(&self) -> pgwire::api::PgWireConnectionState {
            self.$inner.state()
        }
        fn set_state(&mut self, new_state: pgwire::api::PgWireConnectionState) {
            self.$inner.set_state(new_state)
        }
        fn metadata(&self) -> &std::collections::HashMap<String, String> {
            self.$inner.metadata()
        }
        fn metadata_mut(&mut self) -> &mut std::collections::HashMap<String, String> {
            self.$inner.metadata_mut()
        }
        fn session_extensions(&self) -> &pgwire::api::SessionExtensions {
            self.$inner.session_extensions()
        }
        fn sni_server_name(&self) -> Option<&str> {
            self.$inner.sni_server_name()
        }
        fn client_certificates<'c>(
            &self,
        ) -> Option<&[pgwire::tokio::tokio_rustls::rustls::pki_types::CertificateDer<'c>]> {
            self.$inner.client_certificates()
        }
    };
}
pub(in crate::frontend) use delegate_client_info;
