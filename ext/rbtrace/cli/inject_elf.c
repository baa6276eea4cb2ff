/*
 * inject_elf.c - a defined symbol's address in an ELF file's .dynsym, for
 * --inject. Every offset read from the file is checked against its size:
 * the file is the target's (as /proc/PID/root shows it), not trusted.
 */
#include "cli.h"
#include "inject_elf.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INJECT_ELF_MAX (512u << 20) /* a libruby is ~5 MB, libc ~2 */

/* Whether [off, off + len) lies in the file. */
static int inject_elf_in(const struct inject_elf *e, uint64_t off, uint64_t len)
{
    return off <= e->size && len <= e->size - off;
}

int inject_elf_open(struct inject_elf *e, const char *path)
{
    const Elf64_Ehdr *eh;
    struct stat st;
    size_t got = 0;
    int fd, i;

    memset(e, 0, sizeof(*e));
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return CLI_ERR;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr) ||
        (uint64_t)st.st_size > INJECT_ELF_MAX) {
        close(fd);
        errno = ENOEXEC;
        return CLI_ERR;
    }
    e->size = (size_t)st.st_size;
    if (!(e->data = malloc(e->size))) {
        close(fd);
        return CLI_ERR;
    }
    while (got < e->size) {
        ssize_t n = read(fd, e->data + got, e->size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int err = n < 0 ? errno : EIO;
            close(fd);
            inject_elf_close(e);
            errno = err;
            return CLI_ERR;
        }
        got += (size_t)n;
    }
    close(fd);
    eh = (const Elf64_Ehdr *)e->data;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_machine != EM_X86_64 || eh->e_phentsize != sizeof(Elf64_Phdr) ||
        !inject_elf_in(e, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr))) {
        inject_elf_close(e);
        errno = ENOEXEC;
        return CLI_ERR;
    }
    e->first_vaddr = UINT64_MAX;
    for (i = 0; i < eh->e_phnum; i++) {
        const Elf64_Phdr *ph = (const Elf64_Phdr *)(e->data + eh->e_phoff) + i;
        if (ph->p_type == PT_LOAD && ph->p_vaddr < e->first_vaddr) e->first_vaddr = ph->p_vaddr;
    }
    if (e->first_vaddr == UINT64_MAX) {
        inject_elf_close(e);
        errno = ENOEXEC;
        return CLI_ERR;
    }
    e->first_vaddr &= ~(uint64_t)4095;
    return CLI_OK;
}

uint64_t inject_elf_symbol(const struct inject_elf *e, const char *name)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)e->data;
    const Elf64_Shdr *sh;
    const uint16_t *versym = NULL;
    uint64_t n_versym = 0;
    size_t name_len = strlen(name);
    int i;

    if (eh->e_shentsize != sizeof(Elf64_Shdr) ||
        !inject_elf_in(e, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)))
        return 0;
    sh = (const Elf64_Shdr *)(e->data + eh->e_shoff);
    /* Each symbol's version: a hidden one (bit 15) is an old compat
     * version (glibc's dlopen@GLIBC_2.2.5 beside dlopen@@GLIBC_2.34). */
    for (i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type == SHT_GNU_versym && inject_elf_in(e, sh[i].sh_offset, sh[i].sh_size)) {
            versym = (const uint16_t *)(e->data + sh[i].sh_offset);
            n_versym = sh[i].sh_size / 2;
        }
    for (i = 0; i < eh->e_shnum; i++) {
        const Elf64_Shdr *syms = &sh[i], *strs;
        uint64_t n, k;

        if (syms->sh_type != SHT_DYNSYM || syms->sh_link >= eh->e_shnum ||
            syms->sh_entsize != sizeof(Elf64_Sym) ||
            !inject_elf_in(e, syms->sh_offset, syms->sh_size))
            continue;
        strs = &sh[syms->sh_link];
        if (!inject_elf_in(e, strs->sh_offset, strs->sh_size)) continue;
        n = syms->sh_size / sizeof(Elf64_Sym);
        for (k = 1; k < n; k++) {
            const Elf64_Sym *s = (const Elf64_Sym *)(e->data + syms->sh_offset) + k;
            const char *sname;

            if (s->st_shndx == SHN_UNDEF || s->st_value == 0 || s->st_name >= strs->sh_size)
                continue;
            if (strs->sh_size - s->st_name <= name_len) continue;
            sname = (const char *)e->data + strs->sh_offset + s->st_name;
            if (memcmp(sname, name, name_len + 1)) continue;
            if (versym && k < n_versym && (versym[k] & 0x8000)) continue;
            return s->st_value;
        }
    }
    return 0;
}

void inject_elf_close(struct inject_elf *e)
{
    free(e->data);
    e->data = NULL;
    e->size = 0;
}
