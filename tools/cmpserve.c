/* cmpserve.c - the cmpserve command: dispatches to its subcommands. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

struct command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"mkmodel", mkmodel_main, "write a qwen35 GGUF with seeded random weights"},
    {"generate", generate_main, "generate text from a prompt"},
    {"logits", logits_main, "write the logits of a token sequence (reference checks)"},
    {"bench", bench_main, "measure prefill and decode speed against the device's limits"},
    {"serve", serve_main, "serve the OpenAI-compatible HTTP API"},
    {"worker", worker_main, "run one pipeline worker (one GPU, one layer slice)"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: cmpserve <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n'cmpserve <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "cmpserve: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
