# The real-apps suite's Rails app (spec/real/rails_spec.rb): booted by
# `puma -w 2 --preload` from this directory, its database an sqlite3 file in
# a temporary directory (RAILS_APP_DB, a path).
require_relative 'config/environment'
Shop.prepare_database
run Rails.application
