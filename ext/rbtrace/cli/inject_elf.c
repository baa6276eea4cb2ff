/*
 * inject_elf.c - a defined symbol's address in an ELF file's .dynsym, for
 * --inject. Every offset and size read from the file is checked against
 * the file's size: the file is the target's (as /proc/PID/root shows it),
 * not trusted.
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

#define INJECT_ELF_SECTION_MAX (64u << 20)

/* Reads [off, off + len) of the file into a new buffer; NULL if it is not
 * all in the file (size) or cannot be read. */
static void *inject_elf_read(int fd, uint64_t size, uint64_t off, uint64_t len)
{
    unsigned char *buf;
    size_t got = 0;

    if (off > size || len > size - off || len == 0 || len > INJECT_ELF_SECTION_MAX) return NULL;
    if (!(buf = malloc((size_t)len))) return NULL;
    while (got < len) {
        ssize_t n = pread(fd, buf + got, (size_t)len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            free(buf);
            return NULL;
        }
        got += (size_t)n;
    }
    return buf;
}

static int inject_elf_fail(struct inject_elf *e, int fd, int err)
{
    inject_elf_close(e);
    if (fd >= 0) close(fd);
    errno = err;
    return CLI_ERR;
}

int inject_elf_open(struct inject_elf *e, const char *path)
{
    Elf64_Ehdr eh;
    Elf64_Phdr *ph = NULL;
    Elf64_Shdr *sh = NULL;
    struct stat st;
    uint64_t size;
    int fd, i;

    memset(e, 0, sizeof(*e));
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return CLI_ERR;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || pread(fd, &eh, sizeof(eh), 0) != sizeof(eh))
        return inject_elf_fail(e, fd, ENOEXEC);
    size = (uint64_t)st.st_size;
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_machine != EM_X86_64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
        eh.e_shentsize != sizeof(Elf64_Shdr) ||
        !(ph = inject_elf_read(fd, size, eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr))) ||
        !(sh = inject_elf_read(fd, size, eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr)))) {
        free(ph);
        return inject_elf_fail(e, fd, ENOEXEC);
    }
    e->first_vaddr = UINT64_MAX;
    for (i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr < e->first_vaddr)
            e->first_vaddr = ph[i].p_vaddr;
    e->first_vaddr &= ~(uint64_t)4095;
    free(ph);
    for (i = 0; i < eh.e_shnum && !e->syms; i++) {
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh.e_shnum ||
            sh[i].sh_entsize != sizeof(Elf64_Sym))
            continue;
        e->syms = inject_elf_read(fd, size, sh[i].sh_offset, sh[i].sh_size);
        e->syms_size = e->syms ? sh[i].sh_size : 0;
        e->strs = inject_elf_read(fd, size, sh[sh[i].sh_link].sh_offset, sh[sh[i].sh_link].sh_size);
        e->strs_size = e->strs ? sh[sh[i].sh_link].sh_size : 0;
    }
    /* Each symbol's version: a hidden one (bit 15) is an old compat
     * version (glibc's dlopen@GLIBC_2.2.5 beside dlopen@@GLIBC_2.34). */
    for (i = 0; i < eh.e_shnum && !e->versym; i++)
        if (sh[i].sh_type == SHT_GNU_versym) {
            e->versym = inject_elf_read(fd, size, sh[i].sh_offset, sh[i].sh_size);
            e->versym_size = e->versym ? sh[i].sh_size / 2 : 0;
        }
    free(sh);
    close(fd);
    if (e->first_vaddr == UINT64_MAX - 4095 || !e->syms || !e->strs)
        return inject_elf_fail(e, -1, ENOEXEC);
    return CLI_OK;
}

uint64_t inject_elf_symbol(const struct inject_elf *e, const char *name)
{
    size_t name_len = strlen(name), n = e->syms_size / sizeof(Elf64_Sym), k;

    for (k = 1; k < n; k++) {
        const Elf64_Sym *s = (const Elf64_Sym *)e->syms + k;

        if (s->st_shndx == SHN_UNDEF || s->st_value == 0 || s->st_name >= e->strs_size) continue;
        if (e->strs_size - s->st_name <= name_len) continue;
        if (memcmp(e->strs + s->st_name, name, name_len + 1)) continue;
        if (e->versym && k < e->versym_size && (e->versym[k] & 0x8000)) continue;
        return s->st_value;
    }
    return 0;
}

void inject_elf_close(struct inject_elf *e)
{
    free(e->syms);
    free(e->strs);
    free(e->versym);
    memset(e, 0, sizeof(*e));
}
