/* stoker sim mig (cli/cmd_sim_mig.c), reached from cmd_sim.c: argv[0] is
 * "mig". */
#ifndef STOKER_CMD_SIM_MIG_H
#define STOKER_CMD_SIM_MIG_H

int cmd_sim_mig(int argc, char **argv);
/* stoker sim mig --online (cli/cmd_sim_mig_online.c), reached from
 * cmd_sim_mig with the same arguments. */
int cmd_sim_mig_online(int argc, char **argv);

#endif
