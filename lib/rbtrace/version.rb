module RBTrace
  VERSION = '0.6.0'.freeze
end
