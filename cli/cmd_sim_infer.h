/* stoker sim infer (cli/cmd_sim_infer.c), reached from cmd_sim.c: argv[0]
 * is "infer". */
#ifndef STOKER_CMD_SIM_INFER_H
#define STOKER_CMD_SIM_INFER_H

int cmd_sim_infer(int argc, char **argv);

#endif
