/*
 * inject_elf.h - symbols of a library or executable, read from its file's
 * ELF dynamic symbol table, for --inject (inject.c): where libc's dlopen
 * and Ruby's version are in a process, without running anything in it.
 */
#ifndef RBTRACE_CLI_INJECT_ELF_H
#define RBTRACE_CLI_INJECT_ELF_H

#include <stddef.h>
#include <stdint.h>

/* An ELF file's dynamic symbols: only those sections are read (a Ruby
 * executable with its debug information is 50 MB). */
struct inject_elf {
    unsigned char *syms; /* .dynsym */
    size_t syms_size;
    char *strs; /* its string table */
    size_t strs_size;
    uint16_t *versym; /* each symbol's version; NULL if none */
    size_t versym_size;
    uint64_t first_vaddr; /* the lowest PT_LOAD's address, page-aligned */
};

/* Reads the 64-bit x86-64 ELF file at path. CLI_OK, or CLI_ERR with errno
 * set (ENOEXEC: not such a file, or no dynamic symbols). */
int inject_elf_open(struct inject_elf *e, const char *path);

/* A defined dynamic symbol's address relative to the file's load bias
 * (st_value), its default version; 0 if it is not there. */
uint64_t inject_elf_symbol(const struct inject_elf *e, const char *name);

void inject_elf_close(struct inject_elf *e);

#endif
