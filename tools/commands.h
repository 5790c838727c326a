/* commands.h - the subcommands of the cmpserve binary. Each takes the
 * arguments after its name (argv[0] is the subcommand) and returns the
 * process exit status: 0 on success, 1 on any error (after one clear line on
 * stderr), 2 on a usage error. */
#ifndef CS_COMMANDS_H
#define CS_COMMANDS_H

int mkmodel_main(int argc, char **argv);   /* tools/mkmodel.c */
int generate_main(int argc, char **argv);  /* tools/generate.c */
int logits_main(int argc, char **argv);    /* tools/logits.c */
int bench_main(int argc, char **argv);     /* tools/bench.c */
int worker_main(int argc, char **argv);    /* worker/main.c */
int serve_main(int argc, char **argv);     /* coordinator/main.c */

#endif
