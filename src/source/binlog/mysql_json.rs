//! Placeholder while the MySQL binary JSON decoder is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonDecodeError(pub String);
impl std::fmt::Display for JsonDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for JsonDecodeError {}
pub fn binary_json_to_text(_bytes: &[u8], _out: &mut String) -> Result<(), JsonDecodeError> {
    Err(JsonDecodeError(
        "MySQL binary JSON decoding is not built yet".into(),
    ))
}
