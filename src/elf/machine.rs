//! Which machine an ELF file is for, in words, and what follows from it.
//!
//! A setup hook runs on the *build* machine over outputs for the *host*
//! machine, which in a cross build is another machine (an x86_64 builder
//! producing aarch64 libraries for Jetson or SBSA). Nothing in RUNPATH
//! patching depends on the machine: the ELF class and byte order decide how
//! fields are encoded, and the dynamic section is the same structure on every
//! machine. So every machine is patched; the machine only decides the
//! default driver entry (by class, as NixOS does) and how messages name the
//! file's target.

use super::Elf;

/// `e_machine` of the machines this project knows by name. A file for any
/// other machine is still patched when its dynamic section is well formed;
/// its messages then name the number.
const NAMES: &[(u16, &str)] = &[
    (3, "i686"),
    (8, "mips"),
    (20, "ppc"),
    (21, "ppc64"),
    (22, "s390x"),
    (40, "armv7l"),
    (43, "sparc64"),
    (62, "x86_64"),
    (183, "aarch64"),
    (190, "cuda"),
    (224, "amdgpu"),
    (243, "riscv"),
    (258, "loongarch"),
];

/// `e_machine` of MIPS, whose `DT_MIPS_RLD_MAP_REL` is relative to the
/// address of its own dynamic entry and so cannot follow a moved `.dynamic`
/// unchanged.
pub const EM_MIPS: u16 = 8;

/// `DT_MIPS_RLD_MAP_REL`: the debugger's map pointer, as an offset from the
/// address of this dynamic entry.
pub const DT_MIPS_RLD_MAP_REL: i64 = 0x7000_0035;

/// The machine's name, if this project knows it.
pub fn name(e_machine: u16) -> Option<&'static str> {
    NAMES.iter().find(|(m, _)| *m == e_machine).map(|(_, n)| *n)
}

/// The ELF description of the machine this program was built for:
/// `(e_machine, ELFCLASS64, little-endian)`.
pub fn build_machine() -> (u16, bool, bool) {
    let machine = if cfg!(target_arch = "x86_64") {
        62
    } else if cfg!(target_arch = "x86") {
        3
    } else if cfg!(target_arch = "aarch64") {
        183
    } else if cfg!(target_arch = "arm") {
        40
    } else if cfg!(target_arch = "powerpc64") {
        21
    } else if cfg!(target_arch = "riscv64") {
        243
    } else if cfg!(target_arch = "s390x") {
        22
    } else {
        0
    };
    (machine, cfg!(target_pointer_width = "64"), cfg!(target_endian = "little"))
}

/// The target of an ELF file, as messages and reports name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// `e_machine`.
    pub machine: u16,
    /// ELFCLASS64.
    pub is64: bool,
    /// ELFDATA2LSB.
    pub little: bool,
}

impl Target {
    /// The target of a parsed file.
    pub fn of(elf: &Elf<'_>) -> Target {
        Target { machine: elf.machine, is64: elf.layout.is64, little: elf.layout.little }
    }

    /// The target an ELF header declares, read before (and whatever) the
    /// rest parses: so that a truncated foreign file's error names its
    /// machine too. `None` when even the identification is unreadable.
    pub fn peek(data: &[u8]) -> Option<Target> {
        let is64 = match data.get(4)? {
            1 => false,
            2 => true,
            _ => return None,
        };
        let little = match data.get(5)? {
            1 => true,
            2 => false,
            _ => return None,
        };
        let b: [u8; 2] = data.get(18..20)?.try_into().ok()?;
        let machine = if little { u16::from_le_bytes(b) } else { u16::from_be_bytes(b) };
        Some(Target { machine, is64, little })
    }

    /// Whether this is the machine (and class and byte order) this program
    /// runs on.
    pub fn is_build_machine(self) -> bool {
        (self.machine, self.is64, self.little) == build_machine()
    }

    /// Whether the machine has a name here.
    pub fn is_known(self) -> bool {
        name(self.machine).is_some()
    }

    /// E.g. `aarch64 (64-bit, little-endian)`, `ppc64 (64-bit, big-endian)`,
    /// `unknown machine 4242 (32-bit, little-endian)`.
    pub fn describe(self) -> String {
        let class = if self.is64 { "64-bit" } else { "32-bit" };
        let order = if self.little { "little-endian" } else { "big-endian" };
        match name(self.machine) {
            Some(n) => format!("{n} ({class}, {order})"),
            None => format!("unknown machine {} ({class}, {order})", self.machine),
        }
    }

    /// A short name for reports: the machine's name (`ppc64le` for a
    /// little-endian ppc64), or `e_machine N`.
    pub fn short(self) -> String {
        match (self.machine, self.little, self.is64) {
            (21, true, _) => "ppc64le".into(),
            (243, _, true) => "riscv64".into(),
            (243, _, false) => "riscv32".into(),
            (m, _, _) => match name(m) {
                Some(n) => n.into(),
                None => format!("e_machine {m}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_descriptions() {
        let t = Target { machine: 183, is64: true, little: true };
        assert_eq!(t.describe(), "aarch64 (64-bit, little-endian)");
        assert_eq!(Target { machine: 21, is64: true, little: true }.short(), "ppc64le");
        assert_eq!(Target { machine: 21, is64: true, little: false }.short(), "ppc64");
        let u = Target { machine: 4242, is64: false, little: true };
        assert!(!u.is_known());
        assert_eq!(u.describe(), "unknown machine 4242 (32-bit, little-endian)");
        assert_eq!(u.short(), "e_machine 4242");
        assert!(Target { machine: build_machine().0, is64: true, little: true }.is_build_machine());
    }
}
