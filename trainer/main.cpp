// trainer: the command-line entry point.
#include "common/log.h"

int main() {
  dtrain::log::info("dtrain");
  return 0;
}
