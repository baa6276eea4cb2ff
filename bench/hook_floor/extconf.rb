require 'mkmf'
$CFLAGS << ' -Wall -Wextra -Wno-unused-parameter -std=gnu99'
create_makefile('hook_floor')
