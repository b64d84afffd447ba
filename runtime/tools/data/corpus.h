/* whale-data's input side: the files named on the command line (files,
 * directories walked recursively in name order, glob patterns), read into
 * memory as documents (a whole file, or one JSON-lines record's field),
 * checked for UTF-8, and split into train / validation. */
#ifndef WHALE_DATA_CORPUS_H
#define WHALE_DATA_CORPUS_H

#include <stdbool.h>
#include <stddef.h>

struct wd_doc {
    const char *text;  /* into the file's buffer or a decoded JSON string */
    size_t len;
    int file;          /* index into corpus.files */
    long line;         /* 1-based line of a JSON-lines record; 0 for a whole file */
    bool val;          /* in the validation split */
};

struct wd_corpus {
    char **files;
    int nfiles;
    char **bufs;       /* owned buffers (file contents, decoded strings) */
    size_t nbufs, capbufs;
    struct wd_doc *docs;
    size_t ndocs, capdocs;
    size_t bytes;      /* sum of document lengths */
};

/* Expand the inputs into a sorted, de-duplicated file list; errors name the
 * input (missing, unreadable, a pattern with no match, nothing found). */
int wd_corpus_files(struct wd_corpus *c, char **inputs, int n);
/* Read every file: jsonl_field NULL: one document per file; else one per
 * line, the string `jsonl_field` of its object ("": the whole record). Invalid UTF-8, bad JSON, a
 * missing or non-string field: file:line and the problem. Empty documents
 * are skipped. */
int wd_corpus_read(struct wd_corpus *c, const char *jsonl_field);
/* Mark validation documents, spread evenly over the corpus: val_docs > 0
 * takes that many, else round(ndocs * val_fraction). Refuses a split that
 * leaves either side empty (unless val_fraction and val_docs are 0). */
int wd_corpus_split(struct wd_corpus *c, double val_fraction, long val_docs);
void wd_corpus_free(struct wd_corpus *c);

/* Offset of the first byte that is not valid UTF-8, or len when all is. */
size_t wd_utf8_check(const char *s, size_t len);

#endif
