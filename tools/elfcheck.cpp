// SPDX-License-Identifier: MIT
#include "tools/elfcheck.hpp"

#include <cstring>
#include <elf.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace usmc::tools {

namespace {

template <typename Ehdr, typename Phdr, typename Shdr>
void inspect_elf(std::ifstream& in, ExecInfo& info) {
    Ehdr eh;
    in.seekg(0);
    if (!in.read(reinterpret_cast<char*>(&eh), sizeof eh)) return;
    info.kind = ExecKind::StaticElf;
    // Dynamically linked = asks for a program interpreter (ld.so). A static-PIE
    // has PT_DYNAMIC but no PT_INTERP and ignores LD_PRELOAD like any static binary.
    for (unsigned i = 0; i < eh.e_phnum && i < 4096; ++i) {
        Phdr ph;
        in.seekg(static_cast<std::streamoff>(eh.e_phoff + uint64_t{i} * eh.e_phentsize));
        if (!in.read(reinterpret_cast<char*>(&ph), sizeof ph)) break;
        if (ph.p_type == PT_INTERP) info.kind = ExecKind::DynamicElf;
    }
    // Go marks its binaries with a build-info section.
    if (eh.e_shoff == 0 || eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum || eh.e_shnum > 65535)
        return;
    Shdr strtab;
    in.seekg(static_cast<std::streamoff>(eh.e_shoff + uint64_t{eh.e_shstrndx} * eh.e_shentsize));
    if (!in.read(reinterpret_cast<char*>(&strtab), sizeof strtab) || strtab.sh_size > (16u << 20))
        return;
    std::vector<char> names(strtab.sh_size + 1, 0);
    in.seekg(static_cast<std::streamoff>(strtab.sh_offset));
    if (!in.read(names.data(), static_cast<std::streamsize>(strtab.sh_size))) return;
    for (unsigned i = 0; i < eh.e_shnum; ++i) {
        Shdr sh;
        in.seekg(static_cast<std::streamoff>(eh.e_shoff + uint64_t{i} * eh.e_shentsize));
        if (!in.read(reinterpret_cast<char*>(&sh), sizeof sh)) break;
        if (sh.sh_name >= strtab.sh_size) continue;
        const char* name = names.data() + sh.sh_name;
        if (!std::strcmp(name, ".go.buildinfo") || !std::strcmp(name, ".note.go.buildid"))
            info.go = true;
    }
}

} // namespace

ExecInfo inspect_executable(const std::string& path) {
    ExecInfo info;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return info;
    info.setid = (st.st_mode & (S_ISUID | S_ISGID)) != 0;
    std::ifstream in(path, std::ios::binary);
    unsigned char ident[EI_NIDENT] = {};
    if (!in || !in.read(reinterpret_cast<char*>(ident), sizeof ident)) {
        info.kind = in.gcount() >= 2 && ident[0] == '#' && ident[1] == '!' ? ExecKind::Script
                    : in                                                   ? ExecKind::Other
                                                                           : ExecKind::Unreadable;
        return info;
    }
    if (ident[0] == '#' && ident[1] == '!') {
        info.kind = ExecKind::Script;
    } else if (std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
        info.kind = ExecKind::Other;
    } else if (ident[EI_CLASS] == ELFCLASS64) {
        inspect_elf<Elf64_Ehdr, Elf64_Phdr, Elf64_Shdr>(in, info);
    } else if (ident[EI_CLASS] == ELFCLASS32) {
        inspect_elf<Elf32_Ehdr, Elf32_Phdr, Elf32_Shdr>(in, info);
    } else {
        info.kind = ExecKind::Other;
    }
    return info;
}

std::string find_program(const std::string& program, const char* path_env) {
    if (program.empty()) return {};
    if (program.find('/') != std::string::npos)
        return access(program.c_str(), F_OK) == 0 ? program : "";
    std::string paths = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
    size_t start = 0;
    while (start <= paths.size()) {
        size_t end = paths.find(':', start);
        if (end == std::string::npos) end = paths.size();
        // An empty entry means the current directory.
        std::string candidate =
            end > start ? paths.substr(start, end - start) : std::string(1, '.');
        candidate += '/';
        candidate += program;
        struct stat st;
        if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            access(candidate.c_str(), X_OK) == 0)
            return candidate;
        start = end + 1;
    }
    return {};
}

} // namespace usmc::tools
