# The actions the spec and the recipes (docs/recipes.md) trace.
class PostsController < ActionController::API
  def index
    posts = Post.includes(:author).order(:id).limit(10)
    render plain: posts.map { |p| "#{p.title} by #{p.author.name}" }.join("\n")
  end

  def slow
    render plain: Report.new.build
  end

  # The N+1: each post's author loaded on its own.
  def n_plus_one
    posts = Post.order(:id).limit(10).to_a
    render plain: posts.map { |p| "#{p.title} by #{p.author.name}" }.join("\n")
  end

  def boom
    Report.new.explode
  end
end
