//! The chunked request body (RFC 9112 section 7.1): data split off the connection buffer without a
//! copy, extensions and trailers bounded, checked and dropped.
//!
//! It refuses everything hyper's chunked decoder (1.12, `proto/h1/decode.rs`) refuses. Beyond it:
//! a size line's digits and whitespace are bounded ([`MAX_SIZE_LINE`]), extensions may not carry
//! control characters, and a trailer line must end in CRLF (RFC 9112 2.2 and 5), where hyper's
//! takes a bare LF inside one.

use bytes::{Buf, Bytes, BytesMut};

/// hyper's cap on a body's chunk extensions, in bytes after each `;`, summed over the body.
pub const MAX_EXTENSION_BYTES: u64 = 16 * 1024;

/// hyper's cap on a trailer section (its field lines and the blank line that ends it).
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// hyper's cap on trailer fields, its default cap on header fields.
pub const MAX_TRAILER_FIELDS: usize = 100;

/// The longest chunk size with its leading zeros and whitespace before `;` or CRLF: 16 hex digits
/// fill 64 bits, and no client pads a size with 48 more bytes.
pub const MAX_SIZE_LINE: usize = 64;

/// What [`ChunkedDecoder::decode`] found at the front of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes, taken off the buffer.
    Data(Bytes),
    /// The buffer holds no more of the body: read more.
    NeedMore,
    /// The last chunk and the trailers are taken: what follows in the buffer is the next request.
    Done,
}

/// Why a chunked body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("chunk size line has {byte:#04x} where a hex digit, whitespace, ';' or CR belongs")]
    InvalidSize { byte: u8 },
    #[error("chunk size does not fit in 64 bits")]
    SizeOverflow,
    #[error("chunk size with its padding is longer than {MAX_SIZE_LINE} bytes")]
    SizeLineTooLong,
    #[error("chunk extension has the byte {byte:#04x}")]
    InvalidExtension { byte: u8 },
    #[error("chunk extensions are longer than {MAX_EXTENSION_BYTES} bytes")]
    ExtensionsTooLong,
    #[error("chunk line has {byte:#04x} where CRLF belongs")]
    MissingCrlf { byte: u8 },
    #[error("trailer section reaches the {limit}-byte limit")]
    TrailersTooLarge { limit: usize },
    #[error("trailer section has more than {MAX_TRAILER_FIELDS} fields")]
    TooManyTrailers,
    #[error("trailer field has {byte:#04x} where a field name, ':' or value belongs")]
    InvalidTrailer { byte: u8 },
}

impl ChunkError {
    /// Whether this refusal is one hyper's decoder does not make: a padded size line, a control
    /// character in an extension, or a bare LF inside a trailer line.
    pub fn beyond_hyper(&self) -> bool {
        match self {
            ChunkError::SizeLineTooLong => true,
            ChunkError::InvalidExtension { byte } => *byte != b'\n',
            ChunkError::InvalidTrailer { byte } => *byte == b'\n',
            _ => false,
        }
    }
}

/// Where the decoder is in the chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The first hex digit of a chunk size.
    SizeStart,
    Size,
    /// Whitespace after the size: no more digits may come.
    SizeWhitespace,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// After the last chunk: a trailer field, or the CR of the blank line that ends the body.
    TrailerStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    EndLf,
    Done,
}

/// Decodes one chunked body from the front of a connection buffer.
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    /// Of the chunk being read: its size while the size line is read, then its bytes still to come.
    remaining: u64,
    size_line: usize,
    extension_bytes: u64,
    trailer_bytes: usize,
    trailer_fields: usize,
    max_trailer_bytes: usize,
}

impl ChunkedDecoder {
    /// A decoder that refuses a trailer section of `max_trailer_bytes` or more (hyper's rule; its
    /// limit is [`MAX_TRAILER_BYTES`]).
    pub fn new(max_trailer_bytes: usize) -> Self {
        ChunkedDecoder {
            state: State::SizeStart,
            remaining: 0,
            size_line: 0,
            extension_bytes: 0,
            trailer_bytes: 0,
            trailer_fields: 0,
            max_trailer_bytes,
        }
    }

    /// Takes what it can from the front of `buf`: body data split off without copying, or the
    /// framing around it consumed. After `Done`, `buf` starts at the next request.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ChunkError> {
        self.skip_framing(buf)?;
        match self.state {
            State::Done => Ok(Decoded::Done),
            State::Data if !buf.is_empty() => {
                let take = usize::try_from(self.remaining)
                    .map_or(buf.len(), |remaining| remaining.min(buf.len()));
                self.remaining -= take as u64;
                if self.remaining == 0 {
                    self.state = State::DataCr;
                }
                Ok(Decoded::Data(buf.split_to(take).freeze()))
            }
            _ => Ok(Decoded::NeedMore),
        }
    }

    /// Consumes the framing bytes at the front of `buf`, up to a chunk's data or the body's end.
    fn skip_framing(&mut self, buf: &mut BytesMut) -> Result<(), ChunkError> {
        let mut consumed = 0;
        let mut result = Ok(());
        while !matches!(self.state, State::Data | State::Done) {
            let Some(&byte) = buf.get(consumed) else {
                break;
            };
            consumed += 1;
            match self.step(byte) {
                Ok(next) => self.state = next,
                Err(error) => {
                    result = Err(error);
                    break;
                }
            }
        }
        buf.advance(consumed);
        result
    }

    /// The state after `byte`, outside a chunk's data.
    fn step(&mut self, byte: u8) -> Result<State, ChunkError> {
        match self.state {
            State::SizeStart => self.size_start(byte),
            State::Size => self.size(byte),
            State::SizeWhitespace => self.size_whitespace(byte),
            State::Extension => self.extension(byte),
            State::SizeLf => self.size_lf(byte),
            State::DataCr => data_cr(byte),
            State::DataLf => data_lf(byte),
            State::TrailerStart => self.trailer_start(byte),
            State::TrailerName => self.trailer_name(byte),
            State::TrailerValue => self.trailer_value(byte),
            State::TrailerLf => self.trailer_lf(byte),
            State::EndLf => self.end_lf(byte),
            // Not reached: skip_framing stops at both.
            State::Data | State::Done => Ok(self.state),
        }
    }

    /// The first byte of a size line: a new chunk's first hex digit.
    fn size_start(&mut self, byte: u8) -> Result<State, ChunkError> {
        self.remaining = 0;
        self.size_line = 0;
        self.size_digit(byte)
    }

    /// A byte after a size digit: another digit, whitespace, an extension or the line's CR.
    fn size(&mut self, byte: u8) -> Result<State, ChunkError> {
        match byte {
            b' ' | b'\t' => self.padding(State::SizeWhitespace),
            b';' => Ok(State::Extension),
            b'\r' => Ok(State::SizeLf),
            _ => self.size_digit(byte),
        }
    }

    /// A byte after the size's whitespace: more whitespace, an extension or the line's CR.
    fn size_whitespace(&mut self, byte: u8) -> Result<State, ChunkError> {
        match byte {
            b' ' | b'\t' => self.padding(State::SizeWhitespace),
            b';' => Ok(State::Extension),
            b'\r' => Ok(State::SizeLf),
            _ => Err(ChunkError::InvalidSize { byte }),
        }
    }

    /// A byte of a chunk extension, counted against [`MAX_EXTENSION_BYTES`] over the body.
    fn extension(&mut self, byte: u8) -> Result<State, ChunkError> {
        match byte {
            b'\r' => Ok(State::SizeLf),
            b'\t' | b' '..=0x7e | 0x80..=0xff => {
                self.extension_bytes += 1;
                if self.extension_bytes >= MAX_EXTENSION_BYTES {
                    return Err(ChunkError::ExtensionsTooLong);
                }
                Ok(State::Extension)
            }
            _ => Err(ChunkError::InvalidExtension { byte }),
        }
    }

    /// The LF that ends a size line: the chunk's data follows, or the trailers after the last.
    fn size_lf(&mut self, byte: u8) -> Result<State, ChunkError> {
        match byte {
            b'\n' if self.remaining == 0 => Ok(State::TrailerStart),
            b'\n' => Ok(State::Data),
            _ => Err(ChunkError::MissingCrlf { byte }),
        }
    }

    /// The first byte of a trailer line: a field name, or the CR of the blank line that ends the
    /// body.
    fn trailer_start(&mut self, byte: u8) -> Result<State, ChunkError> {
        if byte == b'\r' {
            if self.trailer_fields > 0 {
                self.count_trailer_byte()?;
            }
            return Ok(State::EndLf);
        }
        if self.trailer_fields >= MAX_TRAILER_FIELDS {
            return Err(ChunkError::TooManyTrailers);
        }
        self.count_trailer_byte()?;
        // A field line starts with its name: no obs-fold, no empty name.
        if !super::parse::is_tchar(byte) {
            return Err(ChunkError::InvalidTrailer { byte });
        }
        Ok(State::TrailerName)
    }

    /// A byte of a trailer field's name, or the `:` after it.
    fn trailer_name(&mut self, byte: u8) -> Result<State, ChunkError> {
        self.count_trailer_byte()?;
        match byte {
            b':' => Ok(State::TrailerValue),
            _ if super::parse::is_tchar(byte) => Ok(State::TrailerName),
            _ => Err(ChunkError::InvalidTrailer { byte }),
        }
    }

    /// A byte of a trailer field's value, or the CR that ends its line.
    fn trailer_value(&mut self, byte: u8) -> Result<State, ChunkError> {
        self.count_trailer_byte()?;
        match byte {
            b'\r' => Ok(State::TrailerLf),
            b'\t' | b' '..=0x7e | 0x80..=0xff => Ok(State::TrailerValue),
            _ => Err(ChunkError::InvalidTrailer { byte }),
        }
    }

    /// The LF that ends a trailer field's line, counting the field.
    fn trailer_lf(&mut self, byte: u8) -> Result<State, ChunkError> {
        self.count_trailer_byte()?;
        match byte {
            b'\n' => {
                self.trailer_fields += 1;
                Ok(State::TrailerStart)
            }
            _ => Err(ChunkError::MissingCrlf { byte }),
        }
    }

    /// The LF of the blank line that ends the body.
    fn end_lf(&mut self, byte: u8) -> Result<State, ChunkError> {
        if byte != b'\n' {
            return Err(ChunkError::MissingCrlf { byte });
        }
        if self.trailer_fields > 0 {
            self.count_trailer_byte()?;
        }
        Ok(State::Done)
    }

    /// Adds the hex digit `byte` to the chunk size.
    fn size_digit(&mut self, byte: u8) -> Result<State, ChunkError> {
        let digit = char::from(byte)
            .to_digit(16)
            .ok_or(ChunkError::InvalidSize { byte })?;
        self.remaining = self
            .remaining
            .checked_mul(16)
            .and_then(|size| size.checked_add(u64::from(digit)))
            .ok_or(ChunkError::SizeOverflow)?;
        self.padding(State::Size)
    }

    /// Counts one byte of the size line's digits and whitespace against [`MAX_SIZE_LINE`].
    fn padding(&mut self, next: State) -> Result<State, ChunkError> {
        self.size_line += 1;
        if self.size_line > MAX_SIZE_LINE {
            return Err(ChunkError::SizeLineTooLong);
        }
        Ok(next)
    }

    fn count_trailer_byte(&mut self) -> Result<(), ChunkError> {
        self.trailer_bytes += 1;
        if self.trailer_bytes >= self.max_trailer_bytes {
            return Err(ChunkError::TrailersTooLarge {
                limit: self.max_trailer_bytes,
            });
        }
        Ok(())
    }
}

/// The CR after a chunk's data.
fn data_cr(byte: u8) -> Result<State, ChunkError> {
    match byte {
        b'\r' => Ok(State::DataLf),
        _ => Err(ChunkError::MissingCrlf { byte }),
    }
}

/// The LF after a chunk's data: the next size line follows.
fn data_lf(byte: u8) -> Result<State, ChunkError> {
    match byte {
        b'\n' => Ok(State::SizeStart),
        _ => Err(ChunkError::MissingCrlf { byte }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes all of `input` fed at once: the body, and what is left for the next request.
    fn decode_all(input: &[u8]) -> Result<(Vec<u8>, Vec<u8>), ChunkError> {
        decode_in_pieces(input, input.len().max(1))
    }

    /// Decodes `input` fed `piece` bytes at a time.
    fn decode_in_pieces(input: &[u8], piece: usize) -> Result<(Vec<u8>, Vec<u8>), ChunkError> {
        let mut decoder = ChunkedDecoder::new(MAX_TRAILER_BYTES);
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut pieces = input.chunks(piece);
        loop {
            match decoder.decode(&mut buf)? {
                Decoded::Data(data) => body.extend_from_slice(&data),
                Decoded::Done => {
                    let mut rest = buf.to_vec();
                    rest.extend(pieces.flatten());
                    return Ok((body, rest));
                }
                Decoded::NeedMore => match pieces.next() {
                    Some(piece) => buf.extend_from_slice(piece),
                    None => panic!("{input:?} ended before the body did"),
                },
            }
        }
    }

    fn refused(input: &[u8]) -> ChunkError {
        match decode_all(input) {
            Err(error) => error,
            Ok(decoded) => panic!("{input:?} should be refused, got {decoded:?}"),
        }
    }

    #[test]
    fn chunks_are_joined_and_the_next_request_is_left() {
        let input = b"5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\n\r\nGET /";
        let (body, rest) = decode_all(input).expect("valid");
        assert_eq!(body, b"hello 0123456789");
        assert_eq!(rest, b"GET /");
    }

    #[test]
    fn a_body_fed_byte_by_byte_decodes_the_same() {
        let input = b"5\r\nhello\r\n1 ; a=\"b\"\r\n \r\n0\r\nX-Sum: 1\r\n\r\nNEXT";
        assert_eq!(
            decode_in_pieces(input, 1).expect("valid"),
            decode_all(input).expect("valid")
        );
    }

    #[test]
    fn data_is_split_off_the_buffer_without_waiting_for_the_whole_chunk() {
        let mut decoder = ChunkedDecoder::new(MAX_TRAILER_BYTES);
        let mut buf = BytesMut::from(&b"10\r\nabc"[..]);
        assert_eq!(
            decoder.decode(&mut buf),
            Ok(Decoded::Data(Bytes::from_static(b"abc")))
        );
        assert_eq!(decoder.decode(&mut buf), Ok(Decoded::NeedMore));
        assert!(buf.is_empty());
    }

    #[test]
    fn a_size_that_is_not_hex_is_refused() {
        for input in [
            &b"g\r\n"[..],
            b"-1\r\n",
            b"0x5\r\n",
            b" 5\r\n",
            b"\r\n",
            b"5 5\r\n",
        ] {
            assert!(
                matches!(refused(input), ChunkError::InvalidSize { .. }),
                "{input:?}"
            );
        }
    }

    #[test]
    fn a_size_that_overflows_64_bits_is_refused() {
        assert_eq!(refused(b"10000000000000000\r\n"), ChunkError::SizeOverflow);
        let largest = b"ffffffffffffffff\r\nabc";
        let mut decoder = ChunkedDecoder::new(MAX_TRAILER_BYTES);
        let mut buf = BytesMut::from(&largest[..]);
        assert_eq!(
            decoder.decode(&mut buf),
            Ok(Decoded::Data(Bytes::from_static(b"abc")))
        );
    }

    #[test]
    fn a_size_padded_past_the_limit_is_refused() {
        let mut input = vec![b'0'; MAX_SIZE_LINE];
        input.extend_from_slice(b"5\r\nhello\r\n0\r\n\r\n");
        assert_eq!(refused(&input), ChunkError::SizeLineTooLong);
        let mut padded = vec![b'0'; MAX_SIZE_LINE - 1];
        padded.extend_from_slice(b"5\r\nhello\r\n0\r\n\r\n");
        assert_eq!(decode_all(&padded).expect("valid").0, b"hello");
    }

    #[test]
    fn a_size_line_must_end_in_crlf() {
        assert!(matches!(
            refused(b"5\nhello\r\n"),
            ChunkError::InvalidSize { byte: b'\n' }
        ));
        assert!(matches!(
            refused(b"5\rhello\r\n"),
            ChunkError::MissingCrlf { byte: b'h' }
        ));
        assert!(matches!(
            refused(b"5;a\nhello\r\n"),
            ChunkError::InvalidExtension { byte: b'\n' }
        ));
    }

    #[test]
    fn chunk_data_must_end_in_crlf() {
        assert!(matches!(
            refused(b"5\r\nhelloX\r\n"),
            ChunkError::MissingCrlf { byte: b'X' }
        ));
        assert!(matches!(
            refused(b"5\r\nhello\n0\r\n\r\n"),
            ChunkError::MissingCrlf { byte: b'\n' }
        ));
        assert!(matches!(
            refused(b"5\r\nhello\rX"),
            ChunkError::MissingCrlf { byte: b'X' }
        ));
    }

    #[test]
    fn chunk_extensions_are_bounded_over_the_body() {
        let half = usize::try_from(MAX_EXTENSION_BYTES / 2).expect("small");
        let mut input = Vec::new();
        for _ in 0..2 {
            input.extend_from_slice(b"1;");
            input.extend(std::iter::repeat_n(b'a', half));
            input.extend_from_slice(b"\r\nx\r\n");
        }
        input.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(refused(&input), ChunkError::ExtensionsTooLong);
    }

    #[test]
    fn control_characters_in_an_extension_are_refused() {
        for byte in [0u8, 0x0b, 0x7f] {
            let input = [b'1', b';', b'a', byte, b'\r', b'\n', b'x', b'\r', b'\n'];
            assert_eq!(refused(&input), ChunkError::InvalidExtension { byte });
        }
    }

    #[test]
    fn trailers_are_read_and_dropped() {
        let input = b"3\r\nabc\r\n0\r\nX-Checksum: 1\r\nX-Other:\r\n\r\nNEXT";
        let (body, rest) = decode_all(input).expect("valid");
        assert_eq!(body, b"abc");
        assert_eq!(rest, b"NEXT");
    }

    #[test]
    fn a_trailer_that_is_not_a_field_line_is_refused() {
        for input in [
            &b"0\r\n: v\r\n\r\n"[..],
            b"0\r\n v\r\n\r\n",
            b"0\r\nX v\r\n\r\n",
            b"0\r\nX :v\r\n\r\n",
            b"0\r\nX: a\x00b\r\n\r\n",
            b"0\r\nX: a\nY: b\r\n\r\n",
        ] {
            assert!(
                matches!(refused(input), ChunkError::InvalidTrailer { .. }),
                "{input:?}"
            );
        }
        assert!(matches!(
            refused(b"0\r\nX: a\rY"),
            ChunkError::MissingCrlf { .. }
        ));
        assert!(matches!(
            refused(b"0\r\n\rX"),
            ChunkError::MissingCrlf { .. }
        ));
    }

    #[test]
    fn a_trailer_section_reaching_the_limit_is_refused() {
        let mut decoder = ChunkedDecoder::new(16);
        let mut buf = BytesMut::from(&b"0\r\nX: 0123456789\r\n\r\n"[..]);
        assert_eq!(
            decoder.decode(&mut buf),
            Err(ChunkError::TrailersTooLarge { limit: 16 })
        );
        let mut decoder = ChunkedDecoder::new(16);
        let mut buf = BytesMut::from(&b"0\r\nX: 01234567\r\n\r\n"[..]);
        assert_eq!(decoder.decode(&mut buf), Ok(Decoded::Done));
    }

    #[test]
    fn more_trailer_fields_than_hypers_cap_are_refused() {
        let mut input = b"0\r\n".to_vec();
        for _ in 0..=MAX_TRAILER_FIELDS {
            input.extend_from_slice(b"X: 1\r\n");
        }
        input.extend_from_slice(b"\r\n");
        assert_eq!(refused(&input), ChunkError::TooManyTrailers);
    }

    #[test]
    fn done_is_repeated_and_leaves_the_buffer_alone() {
        let mut decoder = ChunkedDecoder::new(MAX_TRAILER_BYTES);
        let mut buf = BytesMut::from(&b"0\r\n\r\nGET"[..]);
        assert_eq!(decoder.decode(&mut buf), Ok(Decoded::Done));
        assert_eq!(decoder.decode(&mut buf), Ok(Decoded::Done));
        assert_eq!(&buf[..], b"GET");
    }
}
