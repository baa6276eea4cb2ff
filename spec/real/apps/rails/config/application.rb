# A minimal Rails 6.1 app from Debian's ruby-rails: Active Record on sqlite3,
# Action Controller; no asset pipeline, mailers, jobs, storage or cable (they
# need packages or setup the suite does not have). Production mode (eager
# loading, no reloading), as a Puma cluster runs an app.
require 'rails'
require 'active_record/railtie'
require 'action_controller/railtie'

# The database: RAILS_APP_DB, an sqlite3 file the spec puts in a temporary
# directory (no config/database.yml).
ENV['DATABASE_URL'] = "sqlite3:#{ENV.fetch('RAILS_APP_DB')}?pool=8&timeout=5000"

module Shop
  class Application < Rails::Application
    config.load_defaults 6.1
    config.root = File.expand_path('..', __dir__)
    config.eager_load = true
    config.cache_classes = true
    config.consider_all_requests_local = false
    config.secret_key_base = 'rbtrace-real-apps-suite-not-a-secret'
    # Warnings and errors only, to the server's log (the spec's puma.log):
    # no log/ directory in the checkout.
    config.logger = ActiveSupport::Logger.new($stdout)
    config.log_level = :warn
    # No public/ directory: no static files to look for on every request.
    config.public_file_server.enabled = false
  end

  # The tables, created and filled in the master before it forks.
  def self.prepare_database
    ActiveRecord::Schema.verbose = false
    ActiveRecord::Schema.define do
      create_table :authors, force: true do |t|
        t.string :name, null: false
      end
      create_table :posts, force: true do |t|
        t.references :author, null: false
        t.string :title, null: false
      end
    end
    authors = Array.new(5) { |i| Author.create!(name: "author #{i + 1}") }
    20.times { |i| Post.create!(author: authors[i % 5], title: "post #{i + 1}") }
    # The workers open their own connections after the fork.
    ActiveRecord::Base.connection_pool.disconnect!
  end
end
