//! The declarative macros the catalogue is written with: `messages!` (one
//! block per control message), `wire_bits!` (flag bits) and `wire_enum!`
//! (error codes, directions). Each turns one declaration into the Rust
//! item, its codec and its row in the tables the document and the
//! fingerprint are made from.

/// Declares the control messages. Each entry is one of
///
/// ```text
/// /// doc
/// KIND Name { since V, from Side [, check path] } { field: Type, ... }   // struct variant
/// KIND Name(Struct) { since V, from Side } { field: Type, ... }          // newtype of a struct
/// KIND Name(field: Type) { since V, from Side }                          // newtype of a value
/// KIND Name { since V, from Side }                                       // unit
/// ```
///
/// where each field may start with `#[since(V2, default)]`: absent below
/// protocol V2 (decoded as `default`; a value other than `default` cannot
/// be encoded there). `check` names a `fn(&Message) -> Result<(),
/// DecodeError>` run on a decoded message before its end is checked.
macro_rules! messages {
    // A struct variant.
    (@munch [$($done:tt)*]
        $(#[doc = $d:literal])*
        $kind:literal $name:ident { since $since:literal, from $from:ident $(, check $check:path)? }
        { $( $(#[since($fs:literal, $def:expr)])? $f:ident : $c:ty ),* $(,)? }
        $($rest:tt)*
    ) => {
        messages!(@munch [$($done)* [
            [$($d)*] $kind $name $since $from [$($check)?]
            variant [$name { $($f: <$c as Field>::Value),* }]
            shape [Message::$name { $($f),* }]
            fields [$([$f $c [$($fs)?] [$($def)?]])*]
        ]] $($rest)*);
    };
    // A newtype variant over a struct with named fields.
    (@munch [$($done:tt)*]
        $(#[doc = $d:literal])*
        $kind:literal $name:ident ($ty:ident) { since $since:literal, from $from:ident $(, check $check:path)? }
        { $( $(#[since($fs:literal, $def:expr)])? $f:ident : $c:ty ),* $(,)? }
        $($rest:tt)*
    ) => {
        messages!(@munch [$($done)* [
            [$($d)*] $kind $name $since $from [$($check)?]
            variant [$name($ty)]
            shape [Message::$name($ty { $($f),* })]
            fields [$([$f $c [$($fs)?] [$($def)?]])*]
        ]] $($rest)*);
    };
    // A newtype variant over one value.
    (@munch [$($done:tt)*]
        $(#[doc = $d:literal])*
        $kind:literal $name:ident ($f:ident : $c:ty) { since $since:literal, from $from:ident $(, check $check:path)? }
        $($rest:tt)*
    ) => {
        messages!(@munch [$($done)* [
            [$($d)*] $kind $name $since $from [$($check)?]
            variant [$name(<$c as Field>::Value)]
            shape [Message::$name($f)]
            fields [[$f $c [] []]]
        ]] $($rest)*);
    };
    // A unit variant.
    (@munch [$($done:tt)*]
        $(#[doc = $d:literal])*
        $kind:literal $name:ident { since $since:literal, from $from:ident }
        $($rest:tt)*
    ) => {
        messages!(@munch [$($done)* [
            [$($d)*] $kind $name $since $from []
            variant [$name]
            shape [Message::$name]
            fields []
        ]] $($rest)*);
    };
    // Every entry read: the items.
    (@munch [$([
        [$($d:literal)*] $kind:literal $name:ident $since:literal $from:ident [$($check:path)?]
        variant [$($variant:tt)*]
        shape [$($shape:tt)*]
        fields [$($fields:tt)*]
    ])*]) => {
        /// A control message. Declared, one block each, in
        /// `protocol/catalogue/messages.rs`.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Message {
            $($(#[doc = $d])* $($variant)*,)*
        }

        /// Each message's kind byte, by its name.
        #[allow(non_upper_case_globals)]
        pub mod kind {
            $(pub const $name: u8 = $kind;)*
        }

        /// A control message's kind: its variant without its fields (the
        /// conversation orders messages by it).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kind {
            $($name,)*
        }

        impl Kind {
            /// Every kind, in the order declared.
            pub const ALL: &'static [Kind] = &[$(Kind::$name,)*];

            /// Its name, as the variant's.
            pub fn name(self) -> &'static str {
                match self {
                    $(Kind::$name => stringify!($name),)*
                }
            }
        }

        impl std::fmt::Display for Kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        /// The kind of `m`.
        pub fn kind_of(m: &Message) -> Kind {
            match m {
                $(Message::$name { .. } => Kind::$name,)*
            }
        }

        /// Every message, in the order declared.
        pub const MESSAGES: &[MessageDef] = &[$(MessageDef {
            kind: $kind,
            name: stringify!($name),
            since: $since,
            from: Side::$from,
            doc: concat!($($d, "\n",)*),
            fields: messages!(@defs $since [$($fields)*]),
            checks: &[$(stringify!($check)),*],
        },)*];

        impl Message {
            /// The kind byte this message travels with.
            #[allow(unused_variables)]
            pub fn kind(&self) -> u8 {
                match self {
                    $($($shape)* => $kind,)*
                }
            }

            /// Its declaration.
            pub fn def(&self) -> &'static MessageDef {
                def_of(self.kind()).expect("every message is declared")
            }

            /// Appends the kind and the fields as protocol `v` has them.
            pub(super) fn put_at(&self, w: &mut Writer, v: u16) -> Result<(), EncodeError> {
                match self {
                    $($($shape)* => {
                        if v < $since {
                            return Err(EncodeError::NotInVersion {
                                what: stringify!($name),
                                since: $since,
                                version: v,
                            });
                        }
                        w.u8($kind);
                        messages!(@put w v $name [$($fields)*]);
                    })*
                }
                Ok(())
            }

            /// Reads the fields of a message of kind `k` as protocol `v`
            /// has them.
            pub(super) fn get_at(k: u8, r: &mut Reader<'_>, v: u16) -> Result<Message, DecodeError> {
                let m = match k {
                    $($kind => {
                        if v < $since {
                            return Err(DecodeError::NotInVersion {
                                what: stringify!($name),
                                since: $since,
                                version: v,
                            });
                        }
                        messages!(@get r v [$($fields)*]);
                        let m = $($shape)*;
                        $($check(&m)?;)?
                        m
                    })*
                    k => {
                        return Err(DecodeError::Invalid {
                            what: "message kind",
                            value: u64::from(k),
                        })
                    }
                };
                Ok(m)
            }
        }
    };
    (@defs $since:literal [$([$f:ident $c:ty [$($fs:literal)?] [$($def:expr)?]])*]) => {
        &[$(FieldDef {
            name: stringify!($f),
            since: messages!(@since [$($fs)?] $since),
            wire: <$c as Field>::wire,
        },)*]
    };
    (@since [$fs:literal] $since:literal) => { $fs };
    (@since [] $since:literal) => { $since };
    (@put $w:ident $v:ident $name:ident [$([$f:ident $c:ty [$($fs:literal)?] [$($def:expr)?]])*]) => {
        $(messages!(@put1 $w $v $name $f $c [$($fs)?] [$($def)?]);)*
    };
    (@put1 $w:ident $v:ident $name:ident $f:ident $c:ty [$fs:literal] [$def:expr]) => {
        if $v >= $fs {
            <$c as Field>::put($f, $w, $v)?;
        } else if *$f != $def {
            return Err(EncodeError::NotInVersion {
                what: concat!(stringify!($name), ".", stringify!($f)),
                since: $fs,
                version: $v,
            });
        }
    };
    (@put1 $w:ident $v:ident $name:ident $f:ident $c:ty [] []) => {
        <$c as Field>::put($f, $w, $v)?;
    };
    (@get $r:ident $v:ident [$([$f:ident $c:ty [$($fs:literal)?] [$($def:expr)?]])*]) => {
        $(let $f = messages!(@get1 $r $v $c [$($fs)?] [$($def)?]);)*
    };
    (@get1 $r:ident $v:ident $c:ty [$fs:literal] [$def:expr]) => {
        if $v >= $fs { <$c as Field>::get($r, $v)? } else { $def }
    };
    (@get1 $r:ident $v:ident $c:ty [] []) => {
        <$c as Field>::get($r, $v)?
    };
    (@munch [$($done:tt)*] $($rest:tt)*) => {
        compile_error!(concat!("messages!: cannot read the entry at ", stringify!($($rest)*)));
    };
    ($($entries:tt)*) => {
        messages!(@munch [] $($entries)*);
    };
}

/// Declares flag bits of one width: each a `pub const`, with its value, the
/// protocol it came with and its doc text, and the table of them.
///
/// ```text
/// wire_bits! { u32, REQUEST_FLAGS;
///     /// doc
///     REQ_RESUME = 1, since 2;
/// }
/// ```
macro_rules! wire_bits {
    ($t:ty, $table:ident; $($(#[doc = $d:literal])* $name:ident = $value:literal, since $since:literal;)*) => {
        $($(#[doc = $d])* pub const $name: $t = $value;)*

        /// Every bit of this kind, in the order declared.
        pub const $table: &[Bit] = &[$(Bit {
            name: stringify!($name),
            value: $value,
            since: $since,
            doc: concat!($($d, "\n",)*),
        },)*];
    };
}

/// Declares a field-less enum carried as a number: the enum (each variant
/// with its value and doc), its name on the wire and in reports, the
/// protocol each value came with, and the table of them.
macro_rules! wire_enum {
    ($(#[doc = $ed:literal])* pub enum $enum:ident: $t:ty, $table:ident {
        $($(#[doc = $d:literal])* $name:ident = $value:literal, $text:literal, since $since:literal;)*
    }) => {
        $(#[doc = $ed])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $enum {
            $($(#[doc = $d])* $name = $value,)*
        }

        /// Every value, in the order declared.
        pub const $table: &[Bit] = &[$(Bit {
            name: $text,
            value: $value,
            since: $since,
            doc: concat!($($d, "\n",)*),
        },)*];

        impl $enum {
            /// The value with this number, whatever protocol knows it.
            pub fn from_wire(v: $t) -> Option<Self> {
                [$($enum::$name),*].into_iter().find(|x| *x as $t == v)
            }

            /// Its name in reports and in the protocol document.
            pub fn name(self) -> &'static str {
                match self {
                    $($enum::$name => $text,)*
                }
            }

            /// The protocol it came with.
            pub fn since(self) -> u16 {
                match self {
                    $($enum::$name => $since,)*
                }
            }
        }
    };
}
